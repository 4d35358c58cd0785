"""Checkpoints saved through a mount that allows writes (docs/operations.md, "Writes").

Each file is read back through the mount, byte for byte against the same save
into memory (or the model it came from), and its sha256 goes into
S3GDS_TEST_WRITTEN for the Go side to check against the object straight from S3.
"""

import io
import os

import pytest

from . import _path  # noqa: F401

torch = pytest.importorskip("torch")
st = pytest.importorskip("safetensors.torch")


def tensors():
    g = torch.Generator().manual_seed(5)
    return {
        "embed.weight": torch.randn(3000, 1024, generator=g),  # 12 MiB: a multipart upload
        "layer.bias": torch.randn(77, generator=g).to(torch.bfloat16),
        "step": torch.tensor([1234], dtype=torch.int64),
    }


def test_torch_save(write_mount, written):
    t = tensors()
    path = os.path.join(write_mount, "torch", "model.pt")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        torch.save(t, f)
    want = io.BytesIO()
    torch.save(t, want)
    with open(path, "rb") as f:
        assert f.read() == want.getvalue()
    loaded = torch.load(path)
    for name, v in t.items():
        assert torch.equal(loaded[name], v), name
    assert os.path.getsize(path) == len(want.getvalue())
    assert "model.pt" in os.listdir(os.path.dirname(path))
    written.record(path)


def test_safetensors_save_file(write_mount, written):
    # save_file writes a temporary name in the directory, sets its size
    # (ftruncate) before writing it in order, and renames it.
    t = tensors()
    path = os.path.join(write_mount, "st", "model.safetensors")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    st.save_file(t, path, metadata={"format": "pt"})
    with open(path, "rb") as f:
        assert f.read() == st.save(t, metadata={"format": "pt"})
    loaded = st.load_file(path)
    for name, v in t.items():
        assert torch.equal(loaded[name], v), name
    written.record(path)


def test_load_file_onto_the_cpu_reads_the_file_in_one_get(write_mount, written):
    # load_file onto the CPU touches each tensor's first page, then copying
    # the tensors reads them in order: the touches are read aside and one
    # whole-object GET feeds the copies to the end (docs/metrics.md,
    # s3gdsfs_splice_aside_reads_total). 96 MiB: over --direct-io-min-size,
    # so the open is direct I/O and its mapping's reads are spliced.
    import s3gds

    g = torch.Generator().manual_seed(6)
    t = {f"layer{i}.weight": torch.randn(3 << 20, generator=g) for i in range(8)}
    path = os.path.join(write_mount, "st", "cpu.safetensors")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    st.save_file(t, path)
    # What writing left in the page cache goes, so the mapping's reads reach the daemon.
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    done = lambda: (s3gds.stats(write_mount).get("splice_ends_total") or {}).get("done", 0)
    before = done()
    got = {k: v.clone() for k, v in st.load_file(path).items()}
    for name, v in t.items():
        assert torch.equal(got[name], v), name
    assert done() - before == 1, s3gds.stats(write_mount)
    written.record(path)


def test_distributed_checkpoint_file_system_writer(write_mount, written):
    import torch.distributed.checkpoint as dcp

    t = tensors()
    path = os.path.join(write_mount, "dcp", "step-1")
    # Its files, then .metadata written under a temporary name and renamed.
    dcp.save(t, storage_writer=dcp.FileSystemWriter(path), no_dist=True)
    names = sorted(os.listdir(path))
    assert ".metadata" in names and not any(n.endswith(".tmp") for n in names), names
    back = {k: torch.empty_like(v) for k, v in t.items()}
    dcp.load(back, storage_reader=dcp.FileSystemReader(path), no_dist=True)
    for name, v in t.items():
        assert torch.equal(back[name], v), name
    # And through the read ioctl: s3gds's reader takes FileSystemWriter's files.
    from s3gds.dcp import S3GDSStorageReader

    back = {k: torch.empty_like(v) for k, v in t.items()}
    reader = S3GDSStorageReader(path)
    dcp.load(back, storage_reader=reader, no_dist=True)
    for name, v in t.items():
        assert torch.equal(back[name], v), name
    assert reader.stats.ioctl_items == len(t)
    for n in names:
        written.record(os.path.join(path, n))


def test_refusals(write_mount):
    path = os.path.join(write_mount, "refused.bin")
    with open(path, "wb", buffering=0) as f:
        f.write(b"abc")
        with pytest.raises(OSError) as e:
            os.pwrite(f.fileno(), b"x", 0)
        assert e.value.errno == 22  # EINVAL: files are written in order
    with pytest.raises(PermissionError):
        open(path, "ab")  # EPERM: an object is not modified in place
    with pytest.raises(PermissionError):
        open(path, "wb")  # EPERM: replacing needs --allow-overwrite
    with open(path, "rb") as f:
        assert f.read() == b"abc"
    os.remove(path)
    assert not os.path.exists(path)


@pytest.mark.parametrize("shard", [None, "100KB"])
def test_transformers_save_pretrained(write_mount, written, monkeypatch, shard):
    # A tiny GPT-2 built from its config (nothing downloaded), saved through the
    # mount whole and in shards with their index, and loaded back from it.
    transformers = pytest.importorskip("transformers")
    import s3gds

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.manual_seed(13)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=128,
                                     bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config).eval()
    path = os.path.join(write_mount, "hf", "gpt2-sharded" if shard else "gpt2")
    if shard:
        model.save_pretrained(path, max_shard_size=shard)
    else:
        model.save_pretrained(path)
    names = sorted(os.listdir(path))
    shards = [n for n in names if n.endswith(".safetensors")]
    if shard:
        assert len(shards) > 2 and "model.safetensors.index.json" in names, names
    else:
        assert shards == ["model.safetensors"], names
    assert "config.json" in names and not any(n.endswith(".tmp") for n in names), names

    want = model.state_dict()
    back = transformers.GPT2LMHeadModel.from_pretrained(path).eval()
    got = back.state_dict()
    assert sorted(got) == sorted(want)
    for name, w in want.items():
        assert got[name].dtype == w.dtype and torch.equal(got[name], w), name
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.equal(back(ids).logits, model(ids).logits)

    # The files as safetensors and s3gds read them (the tied lm_head is saved once, as wte).
    index = os.path.join(path, "model.safetensors.index.json")
    files = {}
    for n in shards:
        files.update(st.load_file(os.path.join(path, n)))
    loaded = s3gds.load_safetensors(index if shard else os.path.join(path, "model.safetensors"))
    assert sorted(loaded) == sorted(files)
    for name, t in files.items():
        assert torch.equal(loaded[name], t) and torch.equal(t, want[name]), name
    for n in names:
        written.record(os.path.join(path, n))
