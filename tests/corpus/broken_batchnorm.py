"""BatchNorm bugs planted in real architectures, each beside its healthy twin (the line marked `# BUG:` written the
right way):

    ResNet (torchvision's BasicBlock layout)     trained on a batch of one image          | a batch of 8
    SimCLR-style projection head (BatchNorm1d)   trained on a batch of one: one value per channel | a batch of 8

Run one: `python diagnostics/batchnorm.py --case tests/corpus/broken_batchnorm.py:make_resnet_batch_of_one`.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock: conv-BN-ReLU-conv-BN, plus a 1x1 conv-BN shortcut when the shape changes."""

    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.downsample = None
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + identity)


class ResNet(nn.Module):
    def __init__(self, n_classes=10, widths=(8, 16, 32)):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        stages, c = [], widths[0]
        for i, w in enumerate(widths):
            stages.append(BasicBlock(c, w, 1 if i == 0 else 2))
            c = w
        self.layers = nn.Sequential(*stages)
        self.fc = nn.Linear(c, n_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):  # (B, 3, H, W) -> (B, n_classes)
        x = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet_case(broken):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        batch_size = 8
        if broken:
            batch_size = 1  # BUG: DataLoader(batch_size=1): every BatchNorm normalises one image by its own statistics
        x, y = torch.randn(batch_size, 3, 16, 16), torch.randint(0, 10, (batch_size,))
        model = ResNet()
    return {"model": model, "batch": (x, y), "loss_fn": F.cross_entropy, "task": {"kind": "classification", "num_classes": 10}}


def make_resnet():
    return resnet_case(broken=False)


def make_resnet_batch_of_one():
    return resnet_case(broken=True)


class ProjectionHead(nn.Module):
    """SimCLR's projection head: Linear-BatchNorm1d-ReLU-Linear on pooled features, here with a linear probe."""

    def __init__(self, d=32, d_proj=16, n_classes=10):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(3, d, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Sequential(nn.Linear(d, d), nn.BatchNorm1d(d), nn.ReLU(), nn.Linear(d, d_proj))
        self.probe = nn.Linear(d_proj, n_classes)

    def forward(self, x):
        return self.probe(self.head(self.encoder(x)))


def head_case(broken):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        batch_size = 8
        if broken:
            batch_size = 1  # BUG: one image per step: BatchNorm1d sees one value per channel
        x, y = torch.randn(batch_size, 3, 12, 12), torch.randint(0, 10, (batch_size,))
        model = ProjectionHead()
    return {"model": model, "batch": (x, y), "loss_fn": F.cross_entropy, "task": {"kind": "classification", "num_classes": 10}}


def make_projection_head():
    return head_case(broken=False)


def make_projection_head_batch_of_one():
    return head_case(broken=True)


HEALTHY = ["make_resnet", "make_projection_head"]
BROKEN = {"make_resnet_batch_of_one": "make_resnet", "make_projection_head_batch_of_one": "make_projection_head"}
