# loss-accumulated-with-graph: the transformers run_clm_no_trainer.py evaluation loop reuses `loss`
import torch


def main(args, accelerator, model, optimizer, lr_scheduler, train_dataloader, eval_dataloader):
    for epoch in range(args.num_train_epochs):
        model.train()
        for step, batch in enumerate(train_dataloader):
            outputs = model(**batch)
            loss = outputs.loss
            accelerator.backward(loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
            epoch_losses.append(loss)  # BUG: loss-accumulated-with-graph keeps every step's graph
        model.eval()
        losses = []
        for step, batch in enumerate(eval_dataloader):
            with torch.no_grad():
                outputs = model(**batch)
            loss = outputs.loss
            losses.append(accelerator.gather_for_metrics(loss.repeat(args.per_device_eval_batch_size)))
        losses = torch.cat(losses)
