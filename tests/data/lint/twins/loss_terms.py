# detached-loss-term: a detached target, divisor or logging copy is fine; a detached term is not
import torch.nn.functional as F


def vq_step(encoder, decoder, codebook, x, optimizer, beta=0.25):
    optimizer.zero_grad()
    z = encoder(x)
    z_q = codebook(z)
    recon = F.mse_loss(decoder(z + (z_q - z).detach()), x)
    vq_loss = F.mse_loss(z_q, z.detach()) + beta * F.mse_loss(z, z_q.detach())
    loss = recon / recon.detach() + vq_loss
    loss.backward()
    optimizer.step()
    return {"loss": loss.item(), "vq": vq_loss.item()}


def aux_step(model, x, y, optimizer):
    optimizer.zero_grad()
    logits, aux_logits = model(x)
    main_loss = F.cross_entropy(logits, y)
    aux_loss = F.cross_entropy(aux_logits, y)
    loss = main_loss + 0.4 * aux_loss.detach()  # BUG: detached-loss-term
    loss.backward()
    optimizer.step()


def surrogate_step(model, x, y, optimizer):
    optimizer.zero_grad()
    logits = model(x)
    surrogate = F.cross_entropy(logits, y)
    exact = F.multi_margin_loss(logits, y)
    loss = surrogate + (exact - surrogate).detach()  # the exact loss's value, the surrogate's gradient: no finding
    loss.backward()
    optimizer.step()
