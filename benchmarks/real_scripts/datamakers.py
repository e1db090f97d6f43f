"""Tiny-data makers for the real scripts: each writes, under the script's working folder, the few files that script
reads, in its own layout, small enough for a CPU step in seconds. Random but seeded: two runs write the same bytes.

Each maker takes the working folder (a pathlib.Path) and writes relative to it; a script that reads '../data' gets
its data one level up, inside the same temp folder.
"""
import pickle
import struct

import numpy as np

WORDS = ("the of and to in a is was for on as with by he at from his an were are which this be has or had it her "
         "first new after also who they two their one its but she not been have all more than him when most into "
         "over time during other some three where there city only later between under about made while years").split()


def _rng():
    return np.random.default_rng(0)


def text(path, n_words, line_words=12):
    """A random-word corpus, line_words words a line (the shape of WikiText's tokenised lines)."""
    words = _rng().choice(WORDS, size=n_words)
    lines = [" ".join(words[i:i + line_words]) for i in range(0, n_words, line_words)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(" \n".join(lines) + " \n", encoding="utf-8")


def characters(path, n_chars):
    """A character corpus over lowercase letters, spaces and newlines (tiny-shakespeare's kind of input.txt)."""
    alphabet = np.array(list("abcdefghijklmnopqrstuvwxyz   \n"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(_rng().choice(alphabet, size=n_chars)), encoding="utf-8")


def wikitext2_folder(cwd):
    """word_language_model's --data folder: train.txt, valid.txt, test.txt."""
    for name, n in (("train", 4000), ("valid", 600), ("test", 600)):
        text(cwd / "data" / "wikitext-2" / f"{name}.txt", n)


def lightning_wikitext2(cwd):
    """lightning.pytorch.demos.WikiText2's one file, data/wikitext-2.txt: > 4,000 blocks of 35 tokens for its split."""
    text(cwd / "data" / "wikitext-2.txt", 36 * 4600)


def nanogpt_shakespeare_char(cwd):
    """nanoGPT's data/shakespeare_char/: train.bin and val.bin (uint16 token ids) and meta.pkl (vocab_size)."""
    folder = cwd / "data" / "shakespeare_char"
    folder.mkdir(parents=True)
    vocab = 65
    rng = _rng()
    for name, n in (("train", 20000), ("val", 4000)):
        rng.integers(0, vocab, size=n, dtype=np.uint16).tofile(folder / f"{name}.bin")
    chars = [chr(32 + i) for i in range(vocab)]
    with open(folder / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": vocab, "itos": dict(enumerate(chars)), "stoi": {c: i for i, c in enumerate(chars)}}, f)


def input_txt(cwd):
    """input.txt, the character corpus minGPT's chargpt and the ng-video-lecture scripts read."""
    characters(cwd / "input.txt", 20000)


def names_txt(cwd):
    """makemore's names.txt: one lowercase name a line."""
    rng = _rng()
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    names = ["".join(rng.choice(letters, size=rng.integers(3, 9))) for _ in range(1200)]
    (cwd / "names.txt").write_text("\n".join(names) + "\n")


def sine_traindata(cwd):
    """time_sequence_prediction's traindata.pt: a float64 numpy array of sine waves, as generate_sine_wave.py writes
    it (torch.save of the array), 8 waves of 100 points instead of 100 of 1,000."""
    import torch

    rng = np.random.default_rng(2)
    x = np.arange(100)[None, :] + rng.integers(-80, 80, 8)[:, None]
    torch.save(np.sin(x / 20.0).astype("float64"), cwd / "traindata.pt")


def _idx(path, array):
    """One MNIST idx file: the magic (0x08 = uint8, then the number of dimensions), the sizes, the bytes."""
    header = struct.pack(">HBB", 0, 8, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def mnist_raw(root, n_train=64, n_test=32):
    """torchvision's MNIST layout under root: MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte. Every digit
    appears in both splits (the siamese example groups by class)."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = _rng()
    for split, n in (("train", n_train), ("t10k", n_test)):
        labels = np.arange(n) % 10
        images = rng.integers(0, 256, size=(n, 28, 28))
        _idx(raw / f"{split}-images-idx3-ubyte", images)
        _idx(raw / f"{split}-labels-idx1-ubyte", labels)


def mnist_up_one(cwd):
    """MNIST for the pytorch/examples scripts that read '../data'."""
    mnist_raw(cwd.parent / "data")


def mnist_fabric(cwd):
    """MNIST for Lightning's fabric/image_classifier scripts: DATASETS_PATH is the repository's Datasets/ folder."""
    mnist_raw(cwd.parent.parent.parent / "Datasets")


def mnist_lightning_basics(cwd):
    """MNIST for Lightning's pytorch/basics LightningCLI examples: DATASETS_PATH is examples/Datasets, and they split
    the training set into exactly 55,000 + 5,000 images, so it has 60,000 (47 MB of random pixels). Their MNIST
    (lightning.pytorch.demos.mnist_datamodule) first probes torchvision's with a download into ./data: a small one."""
    mnist_raw(cwd.parent.parent / "Datasets", n_train=60000)
    mnist_raw(cwd / "data")


def bsds300(cwd):
    """super_resolution's dataset/BSDS300/images/{train,test}: a few 256 x 256 JPEGs (it crops 256 and downscales)."""
    from PIL import Image

    rng = _rng()
    for split, n in (("train", 8), ("test", 4)):
        folder = cwd / "dataset" / "BSDS300" / "images" / split
        folder.mkdir(parents=True)
        for i in range(n):
            Image.fromarray(rng.integers(0, 256, size=(256, 256, 3), dtype=np.uint8)).save(folder / f"{i}.jpg")


def cora(cwd):
    """The GAT example's ./cora: cora.content (id, binary features, class name a line) and cora.cites (id pairs),
    1,700 nodes (it splits off 1,200 test and 400 validation nodes) with 16 features and 3 classes."""
    rng = _rng()
    folder = cwd / "cora"
    folder.mkdir()
    ids = np.arange(1, 1701)
    features = rng.integers(0, 2, size=(len(ids), 16))
    classes = rng.choice(["Neural_Networks", "Theory", "Rule_Learning"], size=len(ids))
    rows = (["\t".join([str(i), *map(str, row), c]) for i, row, c in zip(ids, features, classes)],
            ["\t".join(map(str, pair)) for pair in rng.choice(ids, size=(3 * len(ids), 2))])
    for name, lines in zip(("cora.content", "cora.cites"), rows):
        (folder / name).write_text("\n".join(lines) + "\n")


def nothing(cwd):
    """The script makes its own data (fake images, an environment, a 2-D point cloud)."""
