# gradient accumulation with accelerate (the diffusers and transformers no_trainer examples): accumulate()
# steps only when the Accelerator was told how many micro-batches to accumulate, and clipping waits for
# sync_gradients; and the two broken twins
import torch.nn.functional as F
from accelerate import Accelerator


def main(args, model, optimizer, lr_scheduler, noise_scheduler, loader):
    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps,
                              mixed_precision=args.mixed_precision, log_with="tensorboard")
    model, optimizer, loader, lr_scheduler = accelerator.prepare(model, optimizer, loader, lr_scheduler)
    global_step = 0
    for epoch in range(args.num_epochs):
        model.train()
        for step, batch in enumerate(loader):
            noise, timesteps = batch["noise"], batch["timesteps"]
            with accelerator.accumulate(model):
                noise_pred = model(noise_scheduler.add_noise(batch["input"], noise, timesteps), timesteps)
                loss = F.mse_loss(noise_pred, noise)
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                global_step += 1


def main_clip_each_micro_batch(args, model, optimizer, loader):
    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        with accelerator.accumulate(model):
            accelerator.backward(model(**batch).loss)
            accelerator.clip_grad_norm_(model.parameters(), 1.0)  # BUG: clip-every-micro-batch
            optimizer.step()
            optimizer.zero_grad()


def main_no_steps(args, model, optimizer, loader):
    accelerator = Accelerator(mixed_precision=args.mixed_precision)  # BUG: accumulate-without-steps
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        with accelerator.accumulate(model):
            accelerator.backward(model(**batch).loss)
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()


def main_from_kwargs(args, model, optimizer, loader, accelerator_kwargs):
    accelerator = Accelerator(**accelerator_kwargs)
    for batch in loader:
        with accelerator.accumulate(model):
            accelerator.backward(model(**batch).loss)
            optimizer.step()
            optimizer.zero_grad()
