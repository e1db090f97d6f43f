"""What the rules know about torch: the names of its losses, activations, autograd switches and loop calls."""

ACTIVATIONS = {
    "torch.softmax": "softmax", "torch.nn.functional.softmax": "softmax", "torch.special.softmax": "softmax",
    "torch.log_softmax": "log_softmax", "torch.nn.functional.log_softmax": "log_softmax",
    "torch.special.log_softmax": "log_softmax",
    "torch.sigmoid": "sigmoid", "torch.nn.functional.sigmoid": "sigmoid", "torch.special.expit": "sigmoid",
}
ACTIVATION_MODULES = {"Softmax": "softmax", "LogSoftmax": "log_softmax", "Sigmoid": "sigmoid"}
# methods that move a tensor (or a module) to a device or dtype and hand it back: its values are the same
MOVES = {"to", "cuda", "cpu", "float", "double", "half", "bfloat16"}
# methods that keep what a tensor holds (probabilities stay probabilities)
RESHAPES = {"view", "reshape", "flatten", "squeeze", "unsqueeze", "permute", "transpose", "contiguous",
            "float", "double", "half", "bfloat16", "to", "cpu", "cuda", "clone", "clamp", "clip",
            "view_as", "reshape_as", "type_as"}
LOSS_FUNCTIONS = {
    "cross_entropy": "ce", "nll_loss": "nll", "binary_cross_entropy_with_logits": "bce_logits",
    "binary_cross_entropy": "bce", "mse_loss": "other", "l1_loss": "other", "smooth_l1_loss": "other",
    "huber_loss": "other", "kl_div": "other", "poisson_nll_loss": "other", "gaussian_nll_loss": "other",
    "cosine_embedding_loss": "other", "margin_ranking_loss": "other", "ctc_loss": "other",
    "triplet_margin_loss": "other", "soft_margin_loss": "other", "multilabel_soft_margin_loss": "other",
    "hinge_embedding_loss": "other", "multi_margin_loss": "other", "multilabel_margin_loss": "other",
}
LOSS_MODULES = {"CrossEntropyLoss": "ce", "NLLLoss": "nll", "BCEWithLogitsLoss": "bce_logits", "BCELoss": "bce"}
# calls that hand back a value with no autograd history
DETACHING_METHODS = {"detach", "item", "numpy", "tolist"}
DETACHING_FUNCTIONS = {"torch.detach"}  # the same cut written as a function
REWRAPS = {"torch.tensor", "torch.Tensor", "torch.FloatTensor", "torch.from_numpy"}
# tensor methods whose result carries the gradient of their inputs
TENSOR_METHODS = RESHAPES | {
    "mean", "sum", "abs", "pow", "exp", "log", "sqrt", "mul", "add", "sub", "div", "neg", "matmul",
    "masked_fill", "gather", "expand", "expand_as", "repeat", "norm", "logsumexp",
    "softmax", "log_softmax", "sigmoid", "tanh", "relu", "t", "square", "prod", "cumsum", "index_select",
}
# ops whose backward reads their own output, so that output must not change in place
SAVES_OUTPUT = {"torch.sigmoid": "sigmoid", "torch.nn.functional.sigmoid": "sigmoid", "torch.tanh": "tanh",
                "torch.nn.functional.tanh": "tanh", "torch.exp": "exp", "torch.sqrt": "sqrt", "torch.rsqrt": "rsqrt",
                "torch.relu": "relu", "torch.nn.functional.relu": "relu", "torch.softmax": "softmax",
                "torch.nn.functional.softmax": "softmax", "torch.log_softmax": "log_softmax",
                "torch.nn.functional.log_softmax": "log_softmax"}
SAVES_OUTPUT_METHODS = {"sigmoid", "tanh", "exp", "sqrt", "rsqrt", "relu", "softmax", "log_softmax"}
NOT_INPLACE = {"requires_grad_", "share_memory_"}
GRAD_OFF = {"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.inference_mode",
            "torch.autograd.grad_mode.no_grad", "torch.autograd.grad_mode.inference_mode"}
LIBRARY_GRAD_OFF = {"monai.networks.eval_mode", "monai.networks.utils.eval_mode"}  # eval mode and torch.no_grad()
GRAD_ON = {"torch.enable_grad", "torch.autograd.enable_grad", "torch.autograd.grad_mode.enable_grad"}
SET_GRAD = {"torch.set_grad_enabled", "torch.autograd.set_grad_enabled"}
CLIPS = {"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm"}
INPUT_GRADS = {"torch.autograd.grad", "torch.autograd.functional.jacobian", "torch.autograd.functional.vjp",
               "torch.func.grad", "torch.func.vjp", "torch.func.jacrev"}
# an adversarial attack differentiates the model's loss with respect to its input inside a library call (advertorch's
# attack.perturb, torchattacks' atk(x, y), foolbox, ART's generate): an evaluation that runs one needs autograd
ATTACK_WORDS = ("attack", "adversar", "perturb", "pgd", "fgsm")
EVENT_NAMES = CLIPS | {"backward", "manual_backward", "zero_", "detach_", "step", "unscale_", "update", "eval", "train"}
DROPOUTS = {"dropout": True, "dropout1d": True, "dropout2d": True, "dropout3d": True,
            "alpha_dropout": False, "feature_alpha_dropout": False}  # name -> default of `training`
