# A small PopTorch training script for the system timeline tests (tests/poptorch/test_system_timeline.py):
# EPOCHS passes over a poptorch.DataLoader of STEPS combined batches of 32 samples (micro-batch 4 x 2 device
# iterations x gradient accumulation 4), one model call per batch and 2 optimizer updates per call (one per
# device iteration), then the weights read back to the host. Synthetic data, a two-block model.
import argparse

import torch
import poptorch

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--steps", type=int, default=3)
args = parser.parse_args()

options = poptorch.Options().deviceIterations(2)
options.Training.gradientAccumulation(4)
per_call = 4 * 2 * 4
generator = torch.Generator().manual_seed(0)
dataset = torch.utils.data.TensorDataset(torch.randn(args.steps * per_call, 8, generator=generator),
                                         torch.randint(0, 3, (args.steps * per_call,), generator=generator))
loader = poptorch.DataLoader(options, dataset, batch_size=4, shuffle=True)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = poptorch.BeginBlock(torch.nn.Linear(8, 16), "first", ipu_id=0)
        self.second = poptorch.BeginBlock(torch.nn.Linear(16, 3), "second", ipu_id=1)

    def forward(self, x, labels):
        out = self.second(torch.relu(self.first(x)))
        return out, torch.nn.functional.cross_entropy(out, labels)


net = Net()
model = poptorch.trainingModel(net, options, optimizer=poptorch.optim.SGD(net.parameters(), lr=0.1))
for epoch in range(args.epochs):
    for x, labels in loader:
        _, loss = model(x, labels)
model.copyWeightsToHost()
print(f"trained {args.epochs} epoch(s) of {len(loader)} call(s): loss {loss.item():.3f}")
