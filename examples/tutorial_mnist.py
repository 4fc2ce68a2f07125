"""A PopDist training script in the style of Graphcore's PopDist tutorial (``popdist_training.py``).

The same file runs under ``poprun --num-instances 2 --num-replicas 4 python tutorial_mnist.py``
and under plain ``python tutorial_mnist.py --num-replicas 4``. The data are synthetic MNIST-like
8 x 8 images (nothing to download); the model is a small CNN with a loss, as in the tutorial.

What each instance saw is written for the tests in the current directory: ``seen-instance-I.json``
(the dataset indices each training step read, and each step's per-replica losses) and
``checkpoint-instance-I.pt`` (the trained weights, which must be equal on every instance), and
``summary.jsonl`` from the first instance alone (``popdist.execute_on_instances``).
``--by-replica`` reads each global batch in the order of the replicas (instance I takes its replicas'
samples, ``popdist.getReplicaIndexOffset()`` on) instead of PopTorch's automatic partition, so that
the same global batch trains at any number of instances.
"""

import argparse
import json
import logging

import torch
import torch.nn.functional as F

import popdist
import popdist.poptorch
import poptorch


class SyntheticDigits(torch.utils.data.Dataset):
    """Digit-like 8 x 8 images whose class sets a brighter row; records the indices read."""

    def __init__(self, samples, seed):
        generator = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 10, (samples,), generator=generator)
        self.images = torch.rand(samples, 1, 8, 8, generator=generator) * 0.2
        self.images[torch.arange(samples), 0, self.labels % 8, :] += 1.0
        self.seen = []

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        self.seen.append(int(index))
        return self.images[index], self.labels[index]


class ModelWithLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, kernel_size=3, padding=1)
        self.fc = torch.nn.Linear(4 * 8 * 8, 10)
        self.loss = torch.nn.NLLLoss(reduction="mean")

    def forward(self, x, y=None):
        logits = self.fc(torch.flatten(F.relu(self.conv(x)), 1))
        if y is None:
            return logits
        loss = self.loss(F.log_softmax(logits, dim=1), y)
        return logits, poptorch.identity_loss(loss, reduction="none")


def train(args):
    instance = popdist.getInstanceIndex() if popdist.isPopdistEnvSet() else 0
    torch.manual_seed(args.seed)  # the same initial weights at any number of instances
    opts = create_options(args)
    dataset = SyntheticDigits(args.samples, args.seed)
    data_train = load_data(args, opts, dataset, train=True)
    model = ModelWithLoss()
    model.train()
    optimizer = poptorch.optim.SGD(model.parameters(), lr=args.learning_rate, momentum=args.momentum,
                                   use_combined_accum=True)
    poptorch_model = poptorch.trainingModel(model, opts, optimizer=optimizer)

    log_in_single_instance("Training the model...")
    steps = []
    for epoch in range(args.epochs):
        log_in_single_instance(f"Epoch {epoch}")
        for x, y in data_train:
            before = len(dataset.seen)
            _, loss = poptorch_model(x, y)
            # Loss contains a value for each replica.
            steps.append({"indices": dataset.seen[before - len(x):before], "losses": torch.atleast_1d(loss).tolist()})
            log_in_single_instance(f"Loss: {torch.mean(loss)}")
    poptorch_model.destroy()

    # Persist checkpoints from all instances even though they are identical (the test checks it).
    torch.save(model.state_dict(), f"checkpoint-instance-{instance}.pt")
    with open(f"seen-instance-{instance}.json", "w") as f:
        json.dump({"instance": instance, "steps": steps}, f)

    # Validation on this instance's share of held-out digits.
    data_validation = load_data(args, opts, SyntheticDigits(args.samples // 2, args.seed + 1), train=False)
    model.eval()
    poptorch_model = poptorch.inferenceModel(model, opts)
    correct = 0
    for x, y in data_validation:
        correct += torch.eq(torch.argmax(poptorch_model(x), 1), y).long().sum().item()
    accuracy = correct / (len(data_validation) * data_validation.combinedBatchSize)
    logging.info(f"Validation accuracy: {accuracy}")
    # One summary for the whole run, written by the first instance alone.
    popdist.execute_on_instances({0}, persist_summary, instance, steps, accuracy)


def persist_summary(instance, steps, accuracy):
    with open("summary.jsonl", "a") as f:
        f.write(json.dumps({"instance": instance, "steps": len(steps), "validation_accuracy": accuracy}) + "\n")


def create_options(args):
    if popdist.isPopdistEnvSet():
        opts = popdist.poptorch.Options()
        # With 'auto_distributed_partitioning=True' and 'shuffle=True' every process must draw the same order.
        opts.randomSeed(args.seed)
        # Replication factor is already set via PopRun so we ignore 'args.num_replicas'.
        logging.info(f"Num of local replicas: {popdist.getNumLocalReplicas()}")
    else:
        opts = poptorch.Options()
        opts.replicationFactor(args.num_replicas)
    return opts


def load_data(args, opts, dataset, train):
    if args.by_replica and train:
        return poptorch.DataLoader(opts, by_replica(dataset, args), batch_size=args.batch_size,
                                   auto_distributed_partitioning=False)
    # PopTorch partitions the dataset among the instances by itself.
    return poptorch.DataLoader(opts, dataset, batch_size=args.batch_size, num_workers=args.dataloader_workers,
                               shuffle=train and not args.by_replica, auto_distributed_partitioning=True)


def by_replica(dataset, args):
    """This instance's replicas' samples of every global batch, in order."""
    total, local = popdist.getNumTotalReplicas(), popdist.getNumLocalReplicas()
    if not popdist.isPopdistEnvSet():
        total = local = args.num_replicas
    first, batch = popdist.getReplicaIndexOffset(), args.batch_size
    steps = len(dataset) // (total * batch)
    indices = [step * total * batch + replica * batch + k
               for step in range(steps) for replica in range(first, first + local) for k in range(batch)]
    return torch.utils.data.Subset(dataset, indices)


def log_in_single_instance(string):
    if not popdist.isPopdistEnvSet() or popdist.getInstanceIndex() == 0:
        logging.info(string)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--num-replicas", type=int, default=4)
    parser.add_argument("--dataloader-workers", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--by-replica", action="store_true")
    if popdist.isPopdistEnvSet():
        popdist.init()
    train(parser.parse_args())
