# loss-accumulated-with-graph: `args` is no loss, and a value through .item() carries no graph
import torch.nn.functional as F


def train(args, accelerator, unet, optimizer, train_dataloader, noise_scheduler):
    train_loss = 0.0
    for step, batch in enumerate(train_dataloader):
        model_pred = unet(batch["noisy"], batch["t"], batch["enc"]).sample
        target = batch["noise"]
        loss = F.mse_loss(model_pred.float(), target.float(), reduction="mean")
        if args.with_prior_preservation:
            prior_loss = F.mse_loss(batch["prior_pred"].float(), batch["prior_target"].float())
            loss = loss + args.prior_loss_weight * prior_loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        avg_loss = accelerator.gather(loss.repeat(args.train_batch_size)).mean()
        train_loss += avg_loss.item() / args.gradient_accumulation_steps
        logged = loss.item()
        train_loss += logged
        train_loss += loss / args.gradient_accumulation_steps  # BUG: loss-accumulated-with-graph
