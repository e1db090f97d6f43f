"""data_sanity's verdicts on the shapes real scripts feed it: a threshold alone warns, a shown harm fails.

Lessons from real scripts (issue 21): pytorch/examples' siamese network feeds raw 0-255 pixels into a net whose first
layers cope (BatchNorm), word_language_model passes an LSTM hidden state (layers, B, H) beside its (T, B) tokens, and
Lightning's demo transformer flattens its (B, T) targets to B*T rows. Our own look-alikes of each.
"""
import torch

import data_sanity


def image_case(net, pixels_as_given):
    torch.manual_seed(0)
    pixels = torch.randint(0, 256, (32, 1, 8, 8)).float()
    labels = (pixels.mean(dim=(1, 2, 3)) > 127.5).long()
    images = pixels if pixels_as_given else (pixels / 255.0 - 0.5) / 0.29
    return {"model": net, "batch": (images, labels), "loss_fn": torch.nn.functional.cross_entropy,
            "task": {"kind": "classification", "num_classes": 2}}


def plain_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


def batchnorm_first_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.Linear(4 * 8 * 8, 2))


def test_raw_pixels_fail_where_the_experiment_shows_the_harm():
    result = data_sanity.check_data_sanity(image_case(plain_net(), pixels_as_given=True))
    assert result.status == "fail", result.summary
    (_, raw_last), (fixed_first, fixed_last) = (result.details["scale_trial"]["as_given"],
                                                        result.details["scale_trial"]["standardised"])
    assert not raw_last < 2 * fixed_last and fixed_last < fixed_first
    assert result.details["scale_trial"]["steps_as_given"] == data_sanity.TRIAL_STEPS


def test_raw_pixels_into_a_net_that_copes_only_warn():
    result = data_sanity.check_data_sanity(image_case(batchnorm_first_net(), pixels_as_given=True))
    assert result.status == "warn", result.summary
    assert "no harm shown" in result.summary


def test_an_rnn_hidden_state_and_flattened_targets_are_not_a_row_disagreement():
    torch.manual_seed(0)
    tokens = torch.randint(0, 20, (12, 4))  # (T, B): time-major
    hidden = (torch.zeros(1, 4, 8), torch.zeros(1, 4, 8))  # (layers, B, H)

    class Lstm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.rnn, self.head = torch.nn.Embedding(20, 8), torch.nn.LSTM(8, 8), torch.nn.Linear(8, 20)

        def forward(self, x, state):
            out, _ = self.rnn(self.embed(x), state)
            return self.head(out).view(-1, 20)  # flattened inside, as the Lightning demo does

    case = {"model": Lstm(), "batch": ((tokens, hidden), torch.randint(0, 20, (48,))),
            "loss_fn": torch.nn.functional.cross_entropy, "task": {"kind": "classification", "batch_dim": 1}}
    result = data_sanity.check_data_sanity(case)
    assert result.status == "pass", result.summary


def test_targets_with_other_rows_than_the_inputs_warn():
    case = {"model": torch.nn.Linear(4, 3), "batch": (torch.randn(16, 4), torch.randint(0, 3, (10,))),
            "loss_fn": torch.nn.functional.cross_entropy}
    assert data_sanity.check_data_sanity(case).status == "warn"


def test_targets_given_to_the_model_are_checked_as_targets_not_as_token_ids():
    """makemore's model(x, y) with -1 (ignored) in y: y is no input of the embedding, so its -1 is no bad token id."""
    torch.manual_seed(0)
    x = torch.randint(0, 27, (4, 6))
    y = torch.cat([x[:, 1:], torch.full((4, 1), -1)], dim=1)
    model = torch.nn.Sequential(torch.nn.Embedding(27, 8), torch.nn.Linear(8, 27))
    case = {"model": model, "batch": ((x, y), y), "loss_fn": lambda out, t: out.sum(),
            "task": {"kind": "causal_lm", "ignore_index": -1, "target_inputs": [1]}}
    assert data_sanity.check_data_sanity(case).status == "pass"
    del case["task"]["target_inputs"]
    assert data_sanity.check_data_sanity(case).status == "warn"


def test_raw_inputs_that_train_to_near_zero_anyway_show_no_harm():
    """siamese_network: raw 0-255 pixels, yet 20 steps take the loss from 1.2 to 4e-05 (standardised: 1e-06): 2x apart
    near zero is no harm. The run as given stops once it is under a hundredth of its start, and the standardised run is
    not made: whatever it reaches, no harm can show."""
    torch.manual_seed(0)
    x = torch.rand(16, 6) * 255
    y = (x[:, 0] > 127.5).long()
    model = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    case = {"model": model, "batch": (x, y), "loss_fn": torch.nn.functional.cross_entropy,
            "optimizer": lambda params: torch.optim.Adam(params, lr=0.05), "task": {"kind": "classification"}}
    result = data_sanity.check_data_sanity(case)
    raw_first, raw_last = result.details["scale_trial"]["as_given"]
    assert raw_last < data_sanity.LEARNED * raw_first and result.details["scale_trial"]["standardised"] is None
    assert 0 < result.details["scale_trial"]["steps_as_given"] < data_sanity.TRIAL_STEPS
    assert result.status == "warn" and "no harm shown" in result.summary, result.summary


class TimestepDenoiser(torch.nn.Module):
    """tiny-diffusion's shape: model(x, t) with integer timesteps 0..999 turned into sinusoids inside, no nn.Embedding."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(2 + 8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))

    def forward(self, x, t):
        freqs = torch.exp(-torch.arange(4) * 2.0)
        angles = t.float()[:, None] * freqs
        return self.net(torch.cat([x, angles.sin(), angles.cos()], dim=1))


def test_integer_timesteps_the_model_reads_itself_are_no_finding_but_raw_bytes_are():
    torch.manual_seed(0)
    x, t = torch.randn(64, 2), torch.randint(0, 1000, (64,))
    case = {"model": TimestepDenoiser(), "batch": ((x, t), torch.randn(64, 2)), "loss_fn": torch.nn.functional.mse_loss,
            "task": {"kind": "regression"}}
    result = data_sanity.check_data_sanity(data_sanity.validate_case(case))
    assert result.status == "pass", result.summary  # a false WARN on tiny-diffusion: "numbers fed as integers?"
    pixels = torch.randint(0, 256, (32, 1, 8, 8), dtype=torch.uint8)

    class Bytes(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = plain_net()

        def forward(self, images):
            return self.net(images.float())

    case = {"model": Bytes(), "batch": (pixels, (pixels.float().mean(dim=(1, 2, 3)) > 127.5).long()),
            "loss_fn": torch.nn.functional.cross_entropy, "task": {"kind": "classification", "num_classes": 2}}
    result = data_sanity.check_data_sanity(data_sanity.validate_case(case))
    assert result.status == "warn" and "raw bytes" in result.summary, result.summary


def test_raw_pixels_at_lr_0_show_no_harm():
    """Neither run of the scale trial can move at lr 0, so the standardised run's lower loss is no harm the scale does:
    its loss must fall for the comparison to mean anything (at lr 0 it ends exactly where it started)."""
    case = image_case(plain_net(), pixels_as_given=True)
    case["optimizer"] = lambda params: torch.optim.SGD(params, lr=0.0)
    result = data_sanity.check_data_sanity(case)
    fixed_first, fixed_last = result.details["scale_trial"]["standardised"]
    assert fixed_last == fixed_first and result.status == "warn" and "no harm shown" in result.summary, result.summary
