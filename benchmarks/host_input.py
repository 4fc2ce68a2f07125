"""Host input: samples one host core prepares per second, for each kind of sample the emulator knows.

    .venv/bin/pip install "pillow>=10"        # the JPEG decoder (not a dependency of popvision itself)
    .venv/bin/python benchmarks/host_input.py  # median of 5 timed rounds per kind, on one core

What a DataLoader worker does per sample, as the PopTorch tutorials and Graphcore's applications
feed their models, on data made here (nothing is downloaded):

* tensor: an MNIST-like 28 x 28 uint8 image through PIL (torchvision's MNIST dataset returns a PIL
  image), to a float tensor, normalised (ToTensor + Normalize), collated into batches of 40;
* image: an ImageNet-sized JPEG (500 x 375, quality 90, ~110 KB, as ImageNet's average image)
  decoded, a random resized crop to 224 x 224, a random flip, to a normalised float tensor (the
  ResNet-50 / ViT training transforms), collated into batches of 16;
* text: a pre-tokenised sequence of 128 ids read from an in-memory array, its attention mask and
  15% masked-token labels made, collated into batches of 8 (BERT pretraining's input).

The emulator's ``host_*_samples_per_s_per_core`` assumptions (engine/assumptions.py) are these
figures, rounded, with an interval for host cores slower and faster than the one measured; the
figures measured are in docs/emulator.md ("Host input pipeline").

It also times what an epoch's start costs (``loader_worker_start_s``): torch's DataLoader starts its
``num_workers`` processes one after the other whenever an iterator is made (each epoch, unless
``persistent_workers=True``); the time from ``iter()`` to the first batch of a trivial dataset, per
worker, with 1, 4 and 16 workers. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from collections.abc import Callable

import numpy as np


def _tensor_kind(rng: np.random.Generator) -> Callable[[], int]:
    import torch
    from PIL import Image

    images = rng.integers(0, 256, size=(1000, 28, 28), dtype=np.uint8)
    mean, std = 0.1307, 0.3081

    def batch() -> int:
        out = []
        for i in rng.integers(0, len(images), 40):
            pil = Image.fromarray(images[i], mode="L")
            x = torch.from_numpy(np.asarray(pil, dtype=np.float32) / 255.0).unsqueeze(0)
            out.append((x - mean) / std)
        torch.stack(out)
        return len(out)
    return batch


def _jpeg(rng: np.random.Generator) -> bytes:
    from PIL import Image

    h, w = 375, 500
    y, x = np.mgrid[0:h, 0:w]
    smooth = np.stack([(x * 255 // w), (y * 255 // h), ((x + y) * 255 // (w + h))], axis=-1)
    noise = rng.normal(0, 24, size=(h, w, 3))
    pixels = np.clip(smooth + noise, 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def _image_kind(rng: np.random.Generator) -> Callable[[], int]:
    import torch
    from PIL import Image

    jpegs = [_jpeg(rng) for _ in range(8)]
    mean = np.array([0.485, 0.456, 0.406], dtype=np.float32)
    std = np.array([0.229, 0.224, 0.225], dtype=np.float32)

    def batch() -> int:
        out = []
        for i in rng.integers(0, len(jpegs), 16):
            img = Image.open(io.BytesIO(jpegs[i])).convert("RGB")
            w, h = img.size
            scale, ratio = rng.uniform(0.08, 1.0), np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
            cw = int(min(w, round(np.sqrt(w * h * scale * ratio))))
            ch = int(min(h, round(np.sqrt(w * h * scale / ratio))))
            left, top = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
            img = img.resize((224, 224), Image.BILINEAR, box=(left, top, left + cw, top + ch))
            if rng.random() < 0.5:
                img = img.transpose(Image.FLIP_LEFT_RIGHT)
            x = (np.asarray(img, dtype=np.float32) / 255.0 - mean) / std
            out.append(torch.from_numpy(x.transpose(2, 0, 1).copy()))
        torch.stack(out)
        return len(out)
    return batch


def _text_kind(rng: np.random.Generator) -> Callable[[], int]:
    import torch

    seq, vocab = 128, 30522
    corpus = rng.integers(1000, vocab, size=(10_000, seq), dtype=np.int32)

    def batch() -> int:
        ids, masks, labels = [], [], []
        for i in rng.integers(0, len(corpus), 8):
            tokens = corpus[i].copy()
            masked = rng.random(seq) < 0.15
            label = np.where(masked, tokens, -100)
            tokens[masked] = 103  # [MASK]
            ids.append(torch.from_numpy(tokens))
            masks.append(torch.ones(seq, dtype=torch.int32))
            labels.append(torch.from_numpy(label))
        torch.stack(ids), torch.stack(masks), torch.stack(labels)
        return len(ids)
    return batch


KINDS = {"tensor": _tensor_kind, "image": _image_kind, "text": _text_kind}


def measure(batch: Callable[[], int], seconds: float) -> float:
    """Samples per second over ``seconds`` of back-to-back batches on this core."""
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        done += batch()
    return done / (time.perf_counter() - start)


def worker_start(workers: int, rounds: int) -> float:
    """Seconds per worker from a DataLoader's ``iter()`` to its first batch (median of ``rounds``),
    on a dataset whose samples cost nothing: the workers' start."""
    import torch

    data = torch.utils.data.TensorDataset(torch.zeros(1_000, 4))
    times = []
    for _ in range(rounds):
        loader = torch.utils.data.DataLoader(data, batch_size=1, num_workers=workers)
        start = time.perf_counter()
        batches = iter(loader)
        next(batches)
        times.append((time.perf_counter() - start) / workers)
        del batches  # its workers stop
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one timed round")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)  # one core, as one DataLoader worker
    rng = np.random.default_rng(0)
    print(f"{'kind':8} {'samples/s per core (median)':>28} {'rounds':>30}")
    for kind, make in KINDS.items():
        batch = make(rng)
        batch()  # warm up
        rates = [measure(batch, args.seconds) for _ in range(args.rounds)]
        print(f"{kind:8} {statistics.median(rates):>28,.0f} {', '.join(f'{r:,.0f}' for r in rates):>30}")
    print(f"\n{'workers':8} {'start per worker, ms (median)':>30}")
    for workers in (1, 4, 16):
        print(f"{workers:8} {1e3 * worker_start(workers, args.rounds):>30.1f}")


if __name__ == "__main__":
    main()
