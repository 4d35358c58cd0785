#!/usr/bin/env bash
# The example PyTorch dataset (client/python/examples/dataset.py) against a
# real mount on a GPU machine, its checksum against the objects' bytes read
# through POSIX and checked by sha256; and, with CUDA, that a file read into
# GPU memory gives back the push slot its open took (--push-readers), so a
# POSIX reader beside it is pushed. Needs .dev/gpu (make gpu-bundle).
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-dataset}
source scripts/gpu/lib.sh
start_store
upload shards/shard- 8 $((96 << 20)) 300 > "$OUT/shards.json"
upload shards/small- 4 $((3 << 20)) 301 > "$OUT/small.json"
mount_s3gdsfs dataset.log --push-readers 1

echo "== push slot and a GPU read (CUDA)"
python3 - "$MP/shards" "$OUT/shards.json" <<'PY'
import hashlib, json, os, sys, urllib.request
import torch
sys.path.insert(0, "client/python")
import s3gds
root, manifest = sys.argv[1], json.load(open(sys.argv[2]))
def metric(name):
    text = urllib.request.urlopen("http://127.0.0.1:9737/metrics").read().decode()
    return sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith("s3gdsfs_" + name))
objs = manifest["objects"]
gpu_path = os.path.join(root, objs[0]["key"].split("/")[-1])
f = open(gpu_path, "rb")
held = metric("push_readers")
buf = torch.empty(objs[0]["size"], dtype=torch.uint8, device="cuda")
r = s3gds.read_into(buf, gpu_path, length=objs[0]["size"], fd=f.fileno())
after = metric("push_readers")
ok_gpu = hashlib.sha256(buf.cpu().numpy().tobytes()).hexdigest() == objs[0]["sha256"]
pushed0 = metric("push_bytes_total")
h = hashlib.sha256()
with open(os.path.join(root, objs[1]["key"].split("/")[-1]), "rb") as g:
    while b := g.read(1 << 20):
        h.update(b)
pushed = metric("push_bytes_total") - pushed0
f.close()
print(f"push_readers with the GPU reader's file open: {held:.0f}; after its GPU read ({r.nbytes} bytes over {r.transport}): {after:.0f}")
print(f"GPU read sha256 {'matches' if ok_gpu else 'DIFFERS'}; POSIX reader beside it: {pushed:.0f} of {objs[1]['size']} bytes pushed, sha256 {'matches' if h.hexdigest() == objs[1]['sha256'] else 'DIFFERS'}")
PY

echo "== examples/dataset.py"
# The reference: every file read through POSIX, checked by sha256, summed.
python3 - "$MP/shards" "$OUT/shards.json" "$OUT/small.json" <<'PY' | tee "$OUT/reference.txt"
import hashlib, json, os, sys
import torch
root = sys.argv[1]
objs = [o for m in sys.argv[2:] for o in json.load(open(m))["objects"]]
total, bad = 0, 0
for o in objs:
    data = open(os.path.join(root, o["key"].split("/")[-1]), "rb").read()
    bad += hashlib.sha256(data).hexdigest() != o["sha256"]
    total += int(torch.frombuffer(bytearray(data), dtype=torch.uint8).sum(dtype=torch.int64))
print(f"reference: {len(objs)} files, {bad} sha256 mismatches, checksum {total}")
PY
python3 client/python/examples/dataset.py "$MP/shards" --http-only | tee "$OUT/dataset.txt"
want=$(awk '{print $NF}' "$OUT/reference.txt")
got=$(awk '/checksum/ {print $NF}' "$OUT/dataset.txt")
[ "$want" = "$got" ] && echo "dataset checksum matches the POSIX reference ($got)" || echo "dataset checksum $got DIFFERS from $want"
unmount_s3gdsfs
