"""Train a small digit classifier pipelined over four IPUs with PopTorch, then test it.

popvision's own example of a pipelined PopTorch program, written for this repository from the
description of Graphcore's PopTorch pipelining tutorial. What it takes from the tutorial are facts:
the network's layer sizes, the four blocks B1..B4 placed one per IPU, and the settings (micro-batch
40, 10 device iterations, gradient accumulation 10, AdamW at learning rate 0.001 with its state off
chip, a test micro-batch of 8 with 100 device iterations). The code is written as a PopTorch user
writes a script for IPU hardware: nothing in its code knows about popvision.

    python examples/mnist_pipeline.py                      # PopTorch's way (popvision's poptorch installed)
    popvision run examples/mnist_pipeline.py --profile --profile-dir profile
    popvision run examples/mnist_pipeline.py -- --strategy sharded --optimiser-on-chip

The images are synthetic (torchvision's MNIST cannot be downloaded here): 28 x 28 grey images, each
one of ten fixed random patterns under noise, so the classifier has something to learn. At the
default sizes one call of the training model reads the whole training set: one call per epoch.
"""

import argparse

import torch
from torch import nn
from tqdm import tqdm

import poptorch

BLOCKS = ("B1", "B2", "B3", "B4")  # pipeline stage k runs block BLOCKS[k] on IPU k
CLASSES = 10
TRAINING_IMAGES = 4_000  # 40 x 10 x 10: one call of the training model
TEST_IMAGES = 800  # 8 x 100: one call of the inference model


def synthetic_digits(count: int, seed: int) -> torch.utils.data.TensorDataset:
    """``count`` images with their labels. The ten patterns come from a fixed seed, so every set drawn
    shares them; ``seed`` draws which pattern each image shows and its noise."""
    patterns = torch.randn(CLASSES, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    draw = torch.Generator().manual_seed(seed)
    labels = torch.randint(CLASSES, (count,), generator=draw)
    noise = torch.randn(count, 1, 28, 28, generator=draw)
    return torch.utils.data.TensorDataset(patterns[labels] + 1.5 * noise, labels)


class DigitClassifier(nn.Module):
    """Two convolutions and two linear layers, one block each. Called with labels, it also returns
    the loss, computed in the last block so that it runs on the last IPU beside the scores it reads."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleDict({
            # each convolution is pooled before its ReLU: 28 x 28 -> 24 x 24 -> 12 x 12, then 8 x 8 -> 4 x 4
            "B1": nn.Sequential(nn.Conv2d(1, 10, kernel_size=5), nn.MaxPool2d(2), nn.ReLU()),
            "B2": nn.Sequential(nn.Conv2d(10, 20, kernel_size=5), nn.MaxPool2d(2), nn.ReLU()),
            "B3": nn.Sequential(nn.Flatten(), nn.Linear(20 * 4 * 4, 256), nn.ReLU()),
            "B4": nn.Linear(256, CLASSES),
        })
        self.loss = nn.CrossEntropyLoss()

    def forward(self, images: torch.Tensor, labels: torch.Tensor | None = None):
        x = images
        for name in BLOCKS:
            with poptorch.Block(name):
                x = self.blocks[name](x)
        if labels is None:
            return x
        with poptorch.Block(BLOCKS[-1]):
            return x, self.loss(x, labels)


def training_options(args: argparse.Namespace) -> poptorch.Options:
    """One call runs ``device_iterations`` weight updates, each over ``gradient_accumulation``
    micro-batches; the blocks become stages, one per IPU, pipelined or run one after another."""
    options = poptorch.Options()
    options.deviceIterations(args.device_iterations)
    options.Training.gradientAccumulation(args.gradient_accumulation)
    stages = [poptorch.Stage(name).ipu(ipu) for ipu, name in enumerate(BLOCKS)]
    if args.strategy == "sharded":
        options.setExecutionStrategy(poptorch.ShardedExecution(*stages))
    else:
        options.setExecutionStrategy(poptorch.PipelinedExecution(*stages))
    if not args.optimiser_on_chip:
        # AdamW's two moments per weight are read only by the weight update: kept in host memory and
        # streamed in for it, they leave the tiles' memory to the activations
        options.TensorLocations.setOptimizerLocation(poptorch.TensorLocationSettings().useOnChipStorage(False))
    # every micro-batch's scores and loss come back, not only the last one's, for the progress bar's
    # figures (at the cost of more data sent to the host)
    options.outputMode(poptorch.OutputMode.All)
    return options


def testing_options(training: poptorch.Options, device_iterations: int) -> poptorch.Options:
    """The training run's stages and placement, without gradient accumulation (nothing to accumulate)."""
    options = training.clone()
    options.Training.gradientAccumulation(1)
    options.deviceIterations(device_iterations)
    return options


def percent_correct(scores: torch.Tensor, labels: torch.Tensor) -> float:
    return 100.0 * (scores.argmax(dim=1) == labels).float().mean().item()


def train(model: poptorch.PoplarExecutor, loader: poptorch.DataLoader, epochs: int) -> None:
    for epoch in range(1, epochs + 1):
        print(f"epoch {epoch} of {epochs}", flush=True)
        progress = tqdm(loader, desc="training", unit="call")
        for images, labels in progress:
            scores, losses = model(images, labels)  # a loss per micro-batch (OutputMode.All)
            progress.set_postfix_str(f"loss {losses.mean().item():.4f}, "
                                     f"accuracy {percent_correct(scores, labels):.1f}%")


def test(model: poptorch.PoplarExecutor, loader: poptorch.DataLoader) -> float:
    """The percentage of the loader's images the model classifies right."""
    right = seen = 0
    for images, labels in tqdm(loader, desc="testing", unit="call"):
        right += int((model(images).argmax(dim=1) == labels).sum())
        seen += len(labels)
    return 100.0 * right / seen


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--epochs", type=int, default=3, help="passes over the training images")
    parser.add_argument("--batch-size", type=int, default=40, help="training micro-batch")
    parser.add_argument("--device-iterations", type=int, default=10, help="weight updates per call of the model")
    parser.add_argument("--gradient-accumulation", type=int, default=10,
                        help="micro-batches per weight update (pipelined over 4 IPUs: at least 7)")
    parser.add_argument("--test-batch-size", type=int, default=8, help="inference micro-batch")
    parser.add_argument("--test-device-iterations", type=int, default=100, help="micro-batches per inference call")
    parser.add_argument("--learning-rate", type=float, default=0.001, help="AdamW's")
    parser.add_argument("--strategy", choices=("pipelined", "sharded"), default="pipelined",
                        help="pipelined: the IPUs work on different micro-batches at once; sharded: one IPU at a time")
    parser.add_argument("--optimiser-on-chip", action="store_true",
                        help="keep AdamW's state in IPU memory instead of streaming it from the host")
    parser.add_argument("--loader-workers", type=int, default=16, help="the DataLoaders' worker processes")
    parser.add_argument("--seed", type=int, default=0, help="for the initial weights and the shuffling")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    options = training_options(args)

    # The loaders take the options their model runs with: a batch they hand out holds one call's
    # micro-batches (micro-batch x device iterations x gradient accumulation images)
    training_data = poptorch.DataLoader(options, synthetic_digits(TRAINING_IMAGES, seed=1),
                                        batch_size=args.batch_size, shuffle=True,
                                        mode=poptorch.DataLoaderMode.Async, num_workers=args.loader_workers)
    inference_options = testing_options(options, args.test_device_iterations)
    test_data = poptorch.DataLoader(inference_options, synthetic_digits(TEST_IMAGES, seed=2),
                                    batch_size=args.test_batch_size, mode=poptorch.DataLoaderMode.Async,
                                    num_workers=args.loader_workers)

    classifier = DigitClassifier()
    optimiser = poptorch.optim.AdamW(classifier.parameters(), lr=args.learning_rate)
    trainer = poptorch.trainingModel(classifier, options, optimizer=optimiser)
    train(trainer, training_data, args.epochs)
    trainer.detachFromDevice()  # frees the IPUs for the inference model

    # The inference model starts from the trained weights: PopTorch copies them back to `classifier`
    tester = poptorch.inferenceModel(classifier, inference_options)
    print(f"test accuracy: {test(tester, test_data):.2f}%")


if __name__ == "__main__":
    main()
