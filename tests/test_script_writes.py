"""`doctor --script` touches nothing of the user's: every kind of write a script attempts goes to a scratch folder or is
refused, and the user's folder is byte-identical afterwards (no file changed, removed or added).

DESIGN.md "Safety"; issue "The doctor on people's own scripts": the word-language-model example truncated a user's
1.5 MB model.pt to 0 bytes under capture (its `open(args.save, 'wb')` was not intercepted). Each kind is planted
before the training loop of a small script run in a folder holding a checkpoint, a log, an array and a folder.
"""
import hashlib
import os

import pytest

import doctor
import ml_debug_contract

pytestmark = [pytest.mark.hostile,
              pytest.mark.skipif(not ml_debug_contract.SUPERVISED, reason="the write guard runs in the supervised child")]

LOOP = """
torch.manual_seed(0)
model = torch.nn.Linear(4, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

# kind -> (code the script runs before its loop, the doctor's exit code: 0 a report, 2 the script's refused write)
WRITES = {
    "open-w": ("open('model.pt', 'wb').write(b'0')", 0),
    "open-a": ("open('log.txt', 'a').write('more')", 0),
    "open-r+": ("f = open('log.txt', 'r+')\nf.write('XX')\nf.close()", 0),
    "open-x-new-file": ("open('new.txt', 'x').write('x')", 0),
    "os-open-truncate": ("os.close(os.open('model.pt', os.O_WRONLY | os.O_TRUNC))", 0),
    "path-write-text": ("pathlib.Path('log.txt').write_text('gone')", 0),
    "path-write-bytes": ("pathlib.Path('model.pt').write_bytes(b'')", 0),
    "makedirs-then-write": ("os.makedirs('runs/new', exist_ok=True)\nopen('runs/new/a.txt', 'w').write('x')", 0),
    "write-then-replace": ("open('model.tmp', 'wb').write(b'new')\nos.replace('model.tmp', 'model.pt')", 0),
    "shutil-copy-over": ("shutil.copy('log.txt', 'model.pt')", 0),
    "torch-save": ("torch.save({'w': 1}, 'model.pt')", 0),
    "torch-serialization-save": ("torch.serialization.save({'w': 1}, 'out/ckpt.pt')", 0),
    "torch-save-into-open-file": ("with open('model.pt', 'wb') as f:\n    torch.save({'w': 1}, f)", 0),
    "np-save": ("numpy.save('data.npy', numpy.zeros(3))", 0),
    "logging-file-handler": ("logging.basicConfig(filename='log.txt', filemode='w', force=True)\nlogging.warning('x')", 0),
    "tensorboard-writer": ("from torch.utils.tensorboard import SummaryWriter\nw = SummaryWriter('out')\n"
                           "w.add_scalar('a', 1.0, 0)\nw.close()", 0),
    "a-made-folder-is-seen": ("os.makedirs('logs/v0', exist_ok=True)\n"  # LightningCLI checks its config's folder first
                              "assert os.path.isdir('logs/v0') and os.access('logs/v0', os.W_OK)\n"
                              "assert pathlib.Path('logs/v0/config.yaml').parent.exists()\n"
                              "open('logs/v0/config.yaml', 'w').write('x')\n"
                              "assert open('logs/v0/config.yaml').read() == 'x' and os.path.isfile('logs/v0/config.yaml')", 0),
    "its-own-folder-removed": ("os.makedirs('tmp_out/sub', exist_ok=True)\nopen('tmp_out/sub/a.txt', 'w').write('x')\n"
                               "fd = os.open('tmp_out/sub', os.O_RDONLY)\nassert os.stat('a.txt', dir_fd=fd).st_size == 1\n"
                               "os.close(fd)\nshutil.rmtree('tmp_out')\nassert not os.path.exists('tmp_out')", 0),
    # (os.stat and shutil.rmtree's unlink and rmdir, each given a folder's descriptor: dir_fd=...)
    "its-own-file-moved-across-folders": ("os.makedirs('a', exist_ok=True)\nos.makedirs('b', exist_ok=True)\n"
                                          "open('a/x.txt', 'w').write('x')\nos.rename('a/x.txt', 'b/x.txt')\n"
                                          "assert open('b/x.txt').read() == 'x'", 0),
    "os-remove": ("os.remove('log.txt')", 2),
    "os-rename": ("os.rename('model.pt', 'old.pt')", 2),
    "shutil-move": ("shutil.move('log.txt', 'moved.txt')", 2),
    "shutil-rmtree": ("shutil.rmtree('out')", 2),
    "os-truncate": ("os.truncate('model.pt', 0)", 2),
}
KERNEL_WRITES = {  # below Python: only the kernel (Landlock) stops these
    "subprocess-shell": "subprocess.run(['sh', '-c', 'echo x > model.pt; rm -f log.txt'])",
    "c-library-open": "ctypes.CDLL(None).open(b'model.pt', os.O_WRONLY | os.O_TRUNC)",
}
HEADER = "import ctypes, logging, os, pathlib, shutil, subprocess\nimport numpy\nimport torch\n"


def user_folder(tmp_path):
    folder = tmp_path / "user"
    (folder / "out").mkdir(parents=True)
    (folder / "model.pt").write_bytes(os.urandom(1 << 20))
    (folder / "log.txt").write_text("step 1 loss 2.3\n")
    (folder / "out" / "keep.txt").write_text("mine\n")
    (folder / "data.npy").write_bytes(b"\x93NUMPY not really")
    return folder


def snapshot(folder):
    """Every file's bytes (hashed) and every folder, relative to `folder`."""
    seen = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            seen[os.path.relpath(os.path.join(root, name), folder) + "/"] = None
        for name in files:
            path = os.path.join(root, name)
            seen[os.path.relpath(path, folder)] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    return seen


def run_script(folder, code, monkeypatch, capfd):
    (folder / "train.py").write_text(HEADER + code + "\n" + LOOP)
    before = snapshot(folder)
    monkeypatch.chdir(folder)
    monkeypatch.setattr(doctor, "CHECKS", [("data_sanity", "data_sanity")])
    exit_code = doctor.main(["--script", "train.py"])
    out, err = capfd.readouterr()
    return exit_code, out, err, before, snapshot(folder)


@pytest.mark.parametrize("kind", sorted(WRITES))
def test_a_scripts_write_leaves_the_users_folder_byte_identical(kind, tmp_path, monkeypatch, capfd):
    code, expected = WRITES[kind]
    exit_code, out, err, before, after = run_script(user_folder(tmp_path), code, monkeypatch, capfd)
    assert after == before
    assert exit_code == expected, (out, err)
    if expected == 0:
        assert "went to a scratch folder" in out and "data_sanity" in out
    else:
        assert err.count("\n") == 1 and "PermissionError" in err and "ml-debug refused" in err


@pytest.mark.parametrize("kind", sorted(KERNEL_WRITES))
def test_writes_below_python_are_refused_by_the_kernel(kind, tmp_path, monkeypatch, capfd):
    if not _landlock_available():
        pytest.skip("this kernel has no Landlock: only Python-level writes are redirected")
    exit_code, out, err, before, after = run_script(user_folder(tmp_path), KERNEL_WRITES[kind], monkeypatch, capfd)
    assert after == before
    assert exit_code == 0, (out, err)


def _landlock_available():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1)) >= 1


def test_the_landlock_rights_asked_for_are_those_the_kernels_abi_knows():
    write_file, refer, truncate = 1 << 1, 1 << 13, 1 << 14  # linux/landlock.h
    rights = {abi: ml_debug_contract.landlock_write_rights(abi) for abi in (1, 2, 3, 7)}
    assert all(rights[abi] & write_file for abi in rights)
    assert [bool(rights[abi] & refer) for abi in rights] == [False, True, True, True]
    assert [bool(rights[abi] & truncate) for abi in rights] == [False, False, True, True]
    assert rights[1] == write_file | sum(1 << bit for bit in range(4, 13))  # REMOVE_DIR .. MAKE_SYM


def test_a_script_that_never_steps_and_saves_at_its_end(tmp_path, monkeypatch, capfd):
    """The word-language-model shape: weights updated by hand, no optimizer, a checkpoint saved and reloaded at the end."""
    folder = user_folder(tmp_path)
    code = ("model = torch.nn.Linear(4, 3)\n"
            "for _ in range(3):\n"
            "    loss = torch.nn.functional.cross_entropy(model(torch.randn(8, 4)), torch.randint(0, 3, (8,)))\n"
            "    model.zero_grad()\n"
            "    loss.backward()\n"
            "    for p in model.parameters():\n"
            "        p.data.add_(p.grad, alpha=-0.1)\n"
            "with open('model.pt', 'wb') as f:\n"
            "    torch.save(model, f)\n"
            "with open('model.pt', 'rb') as f:\n"
            "    model = torch.load(f, weights_only=False)\n")
    (folder / "train.py").write_text(HEADER + code)
    before = snapshot(folder)
    monkeypatch.chdir(folder)
    assert doctor.main(["--script", "train.py"]) == 2
    err = capfd.readouterr().err
    assert snapshot(folder) == before
    assert err.count("\n") == 1
    assert "finished without an optimizer step (3 backward() calls and no torch.optim optimizer.step()" in err
