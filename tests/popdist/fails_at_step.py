"""A PopDist training loop whose instance 1 fails at its second step, while the others wait for its
gradients there (poprun must stop them)."""

import sys

import torch

import popdist
import popdist.poptorch
import poptorch

class WithLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 1)

    def forward(self, x, y):
        return torch.nn.functional.mse_loss(self.fc(x), y)


model = WithLoss()
training = poptorch.trainingModel(model, popdist.poptorch.Options(),
                                  optimizer=poptorch.optim.SGD(model.parameters(), lr=0.1))
for step in range(3):
    if step == 1 and popdist.getInstanceIndex() == 1:
        print("instance 1 fails at step 1", file=sys.stderr, flush=True)
        sys.exit(3)
    training(torch.ones(popdist.getNumLocalReplicas(), 4), torch.zeros(popdist.getNumLocalReplicas(), 1))
    print(f"step {step} done", flush=True)
print("finished", flush=True)
