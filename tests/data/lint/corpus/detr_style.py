"""A set-prediction criterion with weighted loss terms and its epoch loop, in the style of DETR (our own text)."""
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class SetCriterion(nn.Module):
    def __init__(self, num_classes, matcher, weight_dict, eos_coef, losses):
        super().__init__()
        self.num_classes, self.matcher, self.weight_dict, self.losses = num_classes, matcher, weight_dict, losses
        empty_weight = torch.ones(self.num_classes + 1)
        empty_weight[-1] = eos_coef
        self.register_buffer("empty_weight", empty_weight)

    def loss_labels(self, outputs, targets, indices):
        src_logits = outputs["pred_logits"]
        target_classes = torch.full(src_logits.shape[:2], self.num_classes, dtype=torch.int64, device=src_logits.device)
        for i, (src, tgt) in enumerate(indices):
            target_classes[i, src] = targets[i]["labels"][tgt]
        loss_ce = F.cross_entropy(src_logits.transpose(1, 2), target_classes, self.empty_weight)
        return {"loss_ce": loss_ce}

    def loss_boxes(self, outputs, targets, indices, num_boxes):
        src_boxes = torch.cat([outputs["pred_boxes"][i, src] for i, (src, _) in enumerate(indices)])
        target_boxes = torch.cat([t["boxes"][tgt] for t, (_, tgt) in zip(targets, indices)])
        loss_bbox = F.l1_loss(src_boxes, target_boxes, reduction="none")
        return {"loss_bbox": loss_bbox.sum() / num_boxes}

    def forward(self, outputs, targets):
        indices = self.matcher(outputs, targets)
        num_boxes = max(sum(len(t["labels"]) for t in targets), 1)
        losses = {}
        losses.update(self.loss_labels(outputs, targets, indices))
        losses.update(self.loss_boxes(outputs, targets, indices, num_boxes))
        if "aux_outputs" in outputs:
            for i, aux_outputs in enumerate(outputs["aux_outputs"]):
                indices = self.matcher(aux_outputs, targets)
                aux = self.loss_labels(aux_outputs, targets, indices)
                losses.update({k + f"_{i}": v for k, v in aux.items()})
        return losses


def train_one_epoch(model, criterion, data_loader, optimizer, device, max_norm=0.1):
    model.train()
    criterion.train()
    running = []
    for samples, targets in data_loader:
        samples = samples.to(device)
        targets = [{k: v.to(device) for k, v in t.items()} for t in targets]
        outputs = model(samples)
        loss_dict = criterion(outputs, targets)
        weight_dict = criterion.weight_dict
        losses = sum(loss_dict[k] * weight_dict[k] for k in loss_dict.keys() if k in weight_dict)
        loss_value = losses.item()
        if not math.isfinite(loss_value):
            print(f"Loss is {loss_value}, stopping training")
            sys.exit(1)
        optimizer.zero_grad()
        losses.backward()
        if max_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        running.append(loss_value)
    return sum(running) / len(running)
