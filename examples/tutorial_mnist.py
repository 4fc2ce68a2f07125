"""Data-parallel PopTorch training that scales from one process to several `poprun` instances.

popvision's own example of the scale-out the seed talk walks through: the script asks PopDist for
its options when `poprun` started it, so the same file runs as

    python examples/tutorial_mnist.py --num-replicas 4                           # one process, 4 replicas
    poprun --num-instances 2 --num-replicas 4 python examples/tutorial_mnist.py  # 2 instances of 2 replicas

Every replica starts from the same weights (the same seed everywhere), each instance reads its own
share of the data, and the replicas' gradients are averaged before every update, so all instances
end with the same weights. The images are synthetic 8 x 8 "stripes" (nothing to download): class c
brightens row c mod 8.

For the tests, each instance also leaves in the current folder what it did: `seen-instance-I.json`
(per training call, the dataset indices it read and one loss per local replica) and
`checkpoint-instance-I.pt` (its trained weights); instance 0 alone appends the run's line to
`summary.jsonl` (`popdist.execute_on_instances`). `--by-replica` gives each instance its replicas'
samples of every global batch in order (from `popdist.getReplicaIndexOffset()`) instead of
PopTorch's partition of a shuffled dataset, so that any number of instances trains on the same
global batches.
"""

import argparse
import json
import logging

import torch
from torch import nn

import popdist
import popdist.poptorch
import poptorch

log = logging.getLogger("tutorial_mnist")


class Stripes(torch.utils.data.Dataset):
    """Faint noise with one bright row, chosen by the label. Remembers every index it is asked for,
    in order: the loader runs in this process, so the list is what this instance read."""

    def __init__(self, count: int, seed: int) -> None:
        draw = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 10, (count,), generator=draw)
        self.images = 0.2 * torch.rand(count, 1, 8, 8, generator=draw)
        self.images[torch.arange(count), 0, self.labels % 8] += 1.0
        self.read: list[int] = []

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        self.read.append(int(index))
        return self.images[index], self.labels[index]


class StripeClassifier(nn.Module):
    """A 3 x 3 convolution to 4 channels and a linear layer to 10 classes; with labels, the loss too."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, kernel_size=3, padding=1), nn.ReLU(), nn.Flatten())
        self.classify = nn.Linear(4 * 8 * 8, 10)

    def forward(self, images: torch.Tensor, labels: torch.Tensor | None = None):
        scores = self.classify(self.features(images))
        if labels is None:
            return scores
        return scores, nn.functional.cross_entropy(scores, labels)


def replicas(args: argparse.Namespace, distributed: bool) -> tuple[int, int]:
    """(this instance's replicas, all replicas): poprun's counts under poprun, else --num-replicas for both."""
    if distributed:
        return popdist.getNumLocalReplicas(), popdist.getNumTotalReplicas()
    return args.num_replicas, args.num_replicas


def options_for(args: argparse.Namespace, distributed: bool) -> poptorch.Options:
    """Under poprun, PopDist's options: the replicas poprun gave this instance. Otherwise this process
    runs every replica itself."""
    if not distributed:
        return poptorch.Options().replicationFactor(args.num_replicas)
    options = popdist.poptorch.Options()
    # the instances shuffle the dataset independently: with one seed they draw one order, and
    # PopTorch's partition then gives each a block of it that no other instance reads
    options.randomSeed(args.seed)
    return options


def training_data(options: poptorch.Options, dataset: Stripes, args: argparse.Namespace,
                  distributed: bool) -> poptorch.DataLoader:
    """Batches of one call's samples for this instance's replicas."""
    if not args.by_replica:  # PopTorch's partition: this instance's block of the shuffled dataset
        return poptorch.DataLoader(options, dataset, batch_size=args.batch_size, shuffle=True,
                                   num_workers=args.loader_workers, auto_distributed_partitioning=True)
    # every global batch holds each replica's micro-batch in replica order; this instance takes its
    # replicas' part of each, from its first replica on
    local, total = replicas(args, distributed)
    first, global_batch = popdist.getReplicaIndexOffset(), total * args.batch_size
    share = [index for start in range(0, len(dataset) - global_batch + 1, global_batch)
             for index in range(start + first * args.batch_size, start + (first + local) * args.batch_size)]
    return poptorch.DataLoader(options, torch.utils.data.Subset(dataset, share), batch_size=args.batch_size,
                               auto_distributed_partitioning=False)


def train(options: poptorch.Options, args: argparse.Namespace, distributed: bool,
          instance: int) -> tuple[StripeClassifier, list[dict]]:
    """Train on this instance's share; one record per call: the indices read and each local replica's loss."""
    dataset = Stripes(args.samples, args.seed)
    data = training_data(options, dataset, args, distributed)
    classifier = StripeClassifier()
    optimiser = poptorch.optim.SGD(classifier.parameters(), lr=args.learning_rate, momentum=args.momentum)
    trainer = poptorch.trainingModel(classifier, options, optimizer=optimiser)
    calls = []
    for epoch in range(args.epochs):
        for images, labels in data:
            _, losses = trainer(images, labels)  # one loss per local replica (the last micro-batch of each)
            losses = torch.atleast_1d(losses)
            calls.append({"indices": dataset.read[-len(images):], "losses": losses.tolist()})
            if instance == 0:  # the replicas train as one model: one instance's log is enough
                log.info("epoch %d call %d: loss %.4f", epoch + 1, len(calls), losses.mean().item())
    trainer.destroy()
    return classifier, calls


def validate(classifier: StripeClassifier, options: poptorch.Options, args: argparse.Namespace) -> float:
    """The fraction of this instance's share of held-out images classified right."""
    data = poptorch.DataLoader(options, Stripes(args.samples // 2, args.seed + 1), batch_size=args.batch_size,
                               num_workers=args.loader_workers, auto_distributed_partitioning=True)
    tester = poptorch.inferenceModel(classifier.eval(), options)
    right = sum(int((tester(images).argmax(dim=1) == labels).sum()) for images, labels in data)
    return right / (len(data) * data.combinedBatchSize)


def write_summary(instance: int, calls: int, accuracy: float) -> None:
    with open("summary.jsonl", "a") as out:
        out.write(json.dumps({"instance": instance, "calls": calls, "validation_accuracy": accuracy}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--num-replicas", type=int, default=4, help="replicas without poprun (poprun sets its own)")
    parser.add_argument("--samples", type=int, default=64, help="training images (half as many to validate)")
    parser.add_argument("--epochs", type=int, default=1, help="passes over the training images")
    parser.add_argument("--batch-size", type=int, default=2, help="micro-batch per replica")
    parser.add_argument("--learning-rate", type=float, default=0.05, help="SGD's")
    parser.add_argument("--momentum", type=float, default=0.9, help="SGD's")
    parser.add_argument("--loader-workers", type=int, default=5, help="the DataLoaders' worker processes")
    parser.add_argument("--seed", type=int, default=0, help="the initial weights' and the shuffle's, on every instance")
    parser.add_argument("--by-replica", action="store_true",
                        help="each instance reads its replicas' samples of every global batch, in order")
    args = parser.parse_args()

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    distributed = popdist.isPopdistEnvSet()
    if distributed:
        popdist.init()
    instance = popdist.getInstanceIndex()
    torch.manual_seed(args.seed)  # the same initial weights on every instance

    options = options_for(args, distributed)
    log.info("this process runs %d of the %d replicas", *replicas(args, distributed))
    classifier, calls = train(options, args, distributed, instance)
    # identical on every instance (the gradients were averaged); each saves its own for the tests to compare
    torch.save(classifier.state_dict(), f"checkpoint-instance-{instance}.pt")
    with open(f"seen-instance-{instance}.json", "w") as out:
        json.dump({"instance": instance, "steps": calls}, out)

    accuracy = validate(classifier, options, args)
    log.info("validation accuracy on this instance's share: %.3f", accuracy)
    popdist.execute_on_instances({0}, write_summary, instance, len(calls), accuracy)


if __name__ == "__main__":
    main()
