"""The poptorch module's behaviour, small model by small model: batching, training, output modes,
capture, blocks and stages, and what is not covered."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import poptorch
from popvision_py.cli import main
from tests.poptorch.conftest import REPO, subprocess_env


class Regression(torch.nn.Module):
    """y = w.x (no bias), the squared error as the loss: gradients a person can write down."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(2, 1, bias=False)
        with torch.no_grad():
            self.fc.weight.copy_(torch.tensor([[1.0, -1.0]]))

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        with poptorch.Block("only"):
            out = self.fc(x)
            return out, ((out - y) ** 2).mean()


def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.arange(2 * n, dtype=torch.float32).reshape(n, 2) / 10
    return x, x.sum(1, keepdim=True)


def test_the_data_loader_hands_out_what_one_call_consumes() -> None:
    # GIVEN batch 2, 3 device iterations, gradient accumulation 4, 2 replicas over 100 samples
    opts = poptorch.Options().deviceIterations(3).replicationFactor(2)
    opts.Training.gradientAccumulation(4)
    loader = poptorch.DataLoader(opts, torch.utils.data.TensorDataset(torch.arange(100.0)), batch_size=2,
                                 num_workers=8, mode=poptorch.DataLoaderMode.Async)
    # THEN each element holds 2 x 3 x 4 x 2 = 48 samples, the last partial one dropped (PopTorch's default)
    assert loader.combinedBatchSize == 48
    assert len(loader) == 100 // 48 == 2
    assert [len(x) for (x,) in loader] == [48, 48]


def test_training_accumulates_averages_and_steps_once_per_group(capsys) -> None:
    # GIVEN SGD with lr 0.5, 2 device iterations x gradient accumulation 2: 4 micro-batches of 1
    model = Regression()
    opts = poptorch.Options().deviceIterations(2)
    opts.Training.gradientAccumulation(2)
    training = poptorch.trainingModel(model, opts, optimizer=poptorch.optim.SGD(model.parameters(), lr=0.5))
    x, y = batch(4)
    # the same by hand: per group of two micro-batches, the mean of d/dw (w.x - y)^2 = 2 (w.x - y) x
    w = torch.tensor([1.0, -1.0])
    for group in (slice(0, 2), slice(2, 4)):
        grads = [2 * (w @ xi - yi) * xi for xi, yi in zip(x[group], y[group, 0])]
        w = w - 0.5 * sum(grads) / 2
    # WHEN called once with the combined batch
    out, loss = training(x, y)
    # THEN two updates were made, exactly as computed, and OutputMode.Final (training's default)
    # returned the last micro-batch's outputs
    torch.testing.assert_close(model.fc.weight.detach()[0], w)
    assert out.shape == (1, 1) and loss.shape == ()
    assert "Regression: training" in capsys.readouterr().out  # compiled on the first call


def test_compile_captures_without_training_and_the_first_call_does_not_compile_again(capsys) -> None:
    # GIVEN a training model compiled ahead of its first call
    model = Regression()
    training = poptorch.trainingModel(model, optimizer=poptorch.optim.SGD(model.parameters(), lr=0.5))
    x, y = batch(1)  # x = (0, 0.1), y = 0.1
    training.compile(x, y)
    # THEN it is compiled (the summary printed once) and the weights are untouched
    assert training.isCompiled() and capsys.readouterr().out.count("Regression: training") == 1
    assert [op.kind for op in training.compiled.captured.model.ops] == ["matmul", "sub", "pow", "reduce"]
    assert model.fc.weight.detach().tolist() == [[1.0, -1.0]]
    # WHEN called: one SGD step, w - 0.5 x 2 (w.x - y) x = (1, -1) - 0.5 x 2 (-0.2) (0, 0.1) = (1, -0.98),
    # and no second compilation
    training(x, y)
    torch.testing.assert_close(model.fc.weight.detach(), torch.tensor([[1.0, -0.98]]))
    assert "Regression: training" not in capsys.readouterr().out


class Dropped(torch.nn.Module):
    """A linear layer behind dropout: its training depends on torch's random generator."""

    def __init__(self) -> None:
        super().__init__()
        self.drop, self.fc = torch.nn.Dropout(0.5), torch.nn.Linear(16, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        return torch.nn.functional.mse_loss(self.fc(self.drop(x)), y)


def test_random_seed_applies_at_the_first_call_whether_or_not_compile_came_first() -> None:
    # GIVEN one set of initial weights, Options().randomSeed(7), and the generator in another state each time
    initial = Dropped().state_dict()
    x, y = torch.ones(4, 16), torch.ones(4, 1)
    trained = []
    for compile_first, seed in ((False, 1), (True, 2)):
        model = Dropped()
        model.load_state_dict(initial)
        training = poptorch.trainingModel(model, poptorch.Options().randomSeed(7),
                                          optimizer=poptorch.optim.SGD(model.parameters(), lr=0.1))
        torch.manual_seed(seed)
        if compile_first:
            training.compile(x, y)
            torch.rand(5)  # the script draws numbers of its own between compile() and the first call
        training(x, y)
        trained.append(model.fc.weight.detach().clone())
    # THEN both runs drew the same dropout masks: the same weights after the step
    torch.testing.assert_close(trained[0], trained[1], rtol=0, atol=0)


@pytest.mark.parametrize(("mode", "shapes"), [(poptorch.OutputMode.All, [(4, 1), (4,)]),
                                              (poptorch.OutputMode.Sum, [(1, 1), ()]),
                                              (poptorch.OutputMode.EveryN, [(2, 1), (2,)])])
def test_output_modes(mode, shapes) -> None:
    opts = poptorch.Options().deviceIterations(4).outputMode(mode, 2 if mode == poptorch.OutputMode.EveryN else None)
    model = Regression()
    inference = poptorch.inferenceModel(model, opts)
    x, y = batch(4)
    out, loss = inference(x, y)
    assert [tuple(out.shape), tuple(loss.shape)] == shapes
    with torch.no_grad():
        per_sample = [float(((model.fc(x[k:k + 1]) - y[k:k + 1]) ** 2).mean()) for k in range(4)]
    expected = {poptorch.OutputMode.All: per_sample, poptorch.OutputMode.Sum: [sum(per_sample)],
                poptorch.OutputMode.EveryN: per_sample[1::2]}[mode]
    assert loss.reshape(-1).tolist() == pytest.approx(expected)


def test_errors_are_one_sentence() -> None:
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(2)
    with pytest.raises(poptorch.Error, match=r"^You must set poptorch.Options\(\).Training.gradientAccumulation to 1"):
        poptorch.inferenceModel(Regression(), opts)
    training = poptorch.trainingModel(Regression(), opts)
    with pytest.raises(poptorch.Error, match=r"batch dimension of 3, not a multiple of deviceIterations \(1\) x "
                                             r"replicationFactor \(1\) x gradientAccumulation \(2\) = 2\.$"):
        training(*batch(3))
    # a configuration the emulator refuses, in the options' own words: 2 stages train with at least 3 micro-batches
    opts = poptorch.Options().setExecutionStrategy(poptorch.PipelinedExecution("a", "b"))
    with pytest.raises(poptorch.Error, match=r"^Compiling TwoBlocks: Gradient accumulation 1 is below the 3 pipeline "
                                             r"stages of a 2-stage training pipeline \(2N-1 for N=2\); use "
                                             r"Training.gradientAccumulation\(3\) or more\.$"):
        poptorch.trainingModel(TwoBlocks(), opts)(torch.randn(2, 8), torch.randint(0, 4, (2,)))
    for call in (lambda: poptorch.for_loop, lambda: poptorch.Options()._Popart.set("virtualGraphMode", 1),
                 lambda: poptorch.optim.RMSprop, lambda: poptorch.Options().anchorTensor("x", "y"),
                 lambda: poptorch.Options().TensorLocations.numIOTiles(32)):
        with pytest.raises(poptorch.UnsupportedError, match=r"is not supported by popvision's PopTorch emulation; "
                                                            r"docs/poptorch.md lists what is covered\.$"):
            call()


def test_options_clone_is_independent() -> None:
    opts = poptorch.Options().deviceIterations(10)
    opts.TensorLocations.setOptimizerLocation(poptorch.TensorLocationSettings().useOnChipStorage(False))
    clone = opts.clone()
    clone.deviceIterations(100).TensorLocations.setOptimizerLocation(poptorch.TensorLocationSettings())
    assert (opts.device_iterations, clone.device_iterations) == (10, 100)
    assert (opts.TensorLocations.optimizer.on_chip, clone.TensorLocations.optimizer.on_chip) == (False, True)


class Encoder(torch.nn.Module):
    """Embedding, attention (PyTorch's fused kernel), layer norm, GELU, dropout, a cumulative sum (no
    engine builder: generic work) and a classifier; blocks given by BeginBlock and BlockFunction with IPUs."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(50, 16)
        self.qkv = torch.nn.Linear(16, 48)
        self.norm = torch.nn.LayerNorm(16)
        self.drop = torch.nn.Dropout(0.1)
        self.head = torch.nn.Linear(16, 5)
        poptorch.BeginBlock(self.embed, "embed", ipu_id=0)
        poptorch.BeginBlock(self.qkv, "attention", ipu_id=1)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor):
        x = self.embed(ids)  # (N, S, 16)
        q, k, v = self.qkv(x).view(*ids.shape, 3, 2, 8).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(*ids.shape, 16)
        x = self.drop(torch.nn.functional.gelu(self.norm(x + a)))
        return self.classify(x.cumsum(1), labels)

    @poptorch.BlockFunction("head", ipu_id=2)
    def classify(self, x: torch.Tensor, labels: torch.Tensor):
        logits = self.head(x[:, 0])
        return logits, torch.nn.functional.cross_entropy(logits, labels)


def test_the_capture_maps_ops_onto_the_engine_and_auto_stages_by_ipu() -> None:
    # GIVEN the encoder and 5 micro-batches of 3 sequences of 7 tokens, trained with gradient accumulation 5
    # (the least a 3-stage training pipeline takes: 2N-1)
    torch.manual_seed(0)
    model = Encoder()
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(5)
    training = poptorch.trainingModel(model, opts, optimizer=poptorch.optim.Adam(model.parameters()))
    ids, labels = torch.randint(0, 50, (15, 7)), torch.randint(0, 5, (15,))
    # WHEN the first call compiles it
    with pytest.warns(poptorch.GenericOpsWarning, match=r"1 op\(s\) of Encoder as generic work by their FLOPs and "
                                                        r"bytes: aten.cumsum \(1\)\.$"):
        training(ids, labels)
    ops = training.compiled.captured.model.ops
    # THEN each op is the engine's, in the block its BeginBlock / BlockFunction began
    assert [(op.kind, op.block) for op in ops] == [
        ("embedding", "embed"), ("matmul", "attention"), ("matmul", "attention"), ("softmax", "attention"),
        ("matmul", "attention"), ("add", "attention"), ("layer_norm", "attention"), ("gelu", "attention"),
        ("dropout", "attention"), ("cumsum", "attention"), ("matmul", "head"), ("cross_entropy", "head")]
    # FLOPs from the shapes: the QKV projection 2 x (3 x 7) x 16 x 48; the scores 2 x (3 x 2 heads) x 7 x 8 x 7
    assert ops[1].flops == 2 * 21 * 16 * 48 and ops[2].flops == 2 * 6 * 7 * 8 * 7
    # the cumulative sum, which PyTorch has no FLOP formula for: one FLOP per output element, 3 x 7 x 16
    assert ops[9].flops == 3 * 7 * 16
    # and every weight once: 50 x 16 + 16 x 48 + 48 + 2 x 16 + 16 x 5 + 5
    assert training.compiled.captured.model.parameters == sum(p.numel() for p in model.parameters()) == (
        50 * 16 + 16 * 48 + 48 + 2 * 16 + 16 * 5 + 5)
    # the blocks' IPUs made the stages (PopTorch's AutoStage.SameAsIpu): three IPUs
    assert training.compiled.summary.num_ipus == 3
    assert training.compiled.summary.strategy == "pipelined"


def test_a_script_with_an_unsupported_call_is_one_sentence_and_exit_2(tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text("import torch\nimport poptorch\n\nout = poptorch.for_loop(3, lambda x: x, [torch.ones(1)])\n")
    result = CliRunner().invoke(main, ["run", str(script)])
    assert result.exit_code == 2
    assert result.stderr == ("Error: poptorch.for_loop is not supported by popvision's PopTorch emulation; "
                             "docs/poptorch.md lists what is covered.\n")
    assert "Traceback" not in result.output


def test_a_failing_script_names_its_line_and_script_arguments_reach_it(tmp_path: Path) -> None:
    script = tmp_path / "args.py"
    script.write_text("import sys\nimport poptorch\n\nprint(sys.argv[1:])\nif '--fail' in sys.argv:\n    1 / 0\n"
                      "if '--exit' in sys.argv:\n    sys.exit(3)\n")
    ok = CliRunner().invoke(main, ["run", str(script), "--", "--epochs", "1"])
    assert ok.exit_code == 0 and ok.stdout == "['--epochs', '1']\n"
    failed = CliRunner().invoke(main, ["run", str(script), "--", "--fail"])
    assert failed.exit_code == 2
    assert failed.stderr == (f"Error: Script {script} failed at line 6: ZeroDivisionError: division by zero\n")
    assert CliRunner().invoke(main, ["run", str(script), "--", "--exit"]).exit_code == 3  # the script's own code
    # run options belong to engine models, or to a script's --emulate-only: a running script sets its own
    refused = CliRunner().invoke(main, ["run", str(script), "--strategy", "sharded"])
    assert refused.exit_code == 2
    assert refused.stderr == (f"Error: --strategy applies to a PopTorch script only with --emulate-only (its model "
                              f"emulated under the options given, without running its loop); run as it is, {script} "
                              f"takes its options from its poptorch.Options.\n")
    extra = CliRunner().invoke(main, ["run", "mnist", "--", "--epochs", "1"])
    assert extra.exit_code == 2 and "are for PopTorch scripts; mnist is not one" in extra.stderr


def test_without_torch_the_import_names_the_extra(tmp_path: Path) -> None:
    # GIVEN a Python where torch cannot be imported
    hide = "import sys; sys.modules['torch'] = None; "
    direct = subprocess.run([sys.executable, "-c", hide + "import poptorch"], capture_output=True, text=True,
                            env=subprocess_env(), cwd=tmp_path, timeout=60)
    assert direct.returncode == 1
    assert direct.stderr.strip().splitlines()[-1] == (
        'ImportError: popvision\'s poptorch needs PyTorch: pip install "popvision-py[torch]".')
    # and `popvision run` of a PopTorch script says the same in one line
    script = tmp_path / "s.py"
    script.write_text("import poptorch\n")
    via_cli = subprocess.run([sys.executable, "-c", hide + "from popvision_py.cli import main; main()", "run",
                              str(script)], capture_output=True, text=True, env=subprocess_env(), cwd=REPO, timeout=60)
    assert via_cli.returncode == 2
    assert via_cli.stderr == 'Error: popvision\'s poptorch needs PyTorch: pip install "popvision-py[torch]".\n'


def test_recomputation_checkpoints_and_print_tensor_are_values_unchanged() -> None:
    x = torch.ones(2)
    assert poptorch.ipu_print_tensor(x, "x") is x and poptorch.nop(x) is x
    assert poptorch.recomputationCheckpoint(x) is x
    assert poptorch.identity_loss(torch.tensor([1.0, 3.0]), "mean").item() == 2.0
    assert math.isclose(poptorch.serializedMatMul(torch.eye(2), x, None, 2).sum().item(), 2.0)


def test_capture_script_stops_at_the_first_call_without_training(tmp_path: Path) -> None:
    from engine.plan import make_plan
    from poptorch._script import capture_script
    from tests.poptorch.conftest import EXAMPLE

    # GIVEN the pipelined example, captured (not run) up to its training model's first call
    captured = capture_script(EXAMPLE)
    # THEN the model is the example's network with its options and stages, ready to plan
    assert [op.kind for op in captured.model.ops] == ["conv", "maxpool", "relu", "conv", "maxpool", "relu", "matmul",
                                                      "relu", "matmul", "cross_entropy"]
    o = captured.options
    assert (o.micro_batch_size, o.gradient_accumulation, o.device_iterations, o.optimiser) == (40, 10, 10, "adamw")
    assert not o.tensor_locations.optimiser_on_chip and captured.training and not captured.generic
    plan = make_plan(captured.model, o, captured.layout)
    assert [(s.ipu, s.blocks) for s in plan.stages] == [(0, ("B1",)), (1, ("B2",)), (2, ("B3",)), (3, ("B4",))]


class TwoBlocks(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = poptorch.BeginBlock(torch.nn.Linear(8, 8), "a", ipu_id=0)
        self.b = poptorch.BeginBlock(torch.nn.Linear(8, 4), "b", ipu_id=1)

    def forward(self, x: torch.Tensor, labels: torch.Tensor):
        out = self.b(torch.relu(self.a(x)))
        return out, torch.nn.functional.cross_entropy(out, labels)


@pytest.mark.parametrize(("strategy", "replicas", "expected"), [
    (poptorch.PipelinedExecution("a", "b"), 1, ("pipelined", 2, 1)),
    (poptorch.ShardedExecution(poptorch.AutoStage.AutoIncrement), 1, ("sharded", 2, 1)),
    (poptorch.SerialPhasedExecution(poptorch.Phase("a"), poptorch.Phase("b")), 1, ("phased", 2, 1)),
    (poptorch.PipelinedExecution(poptorch.Stage("a", "b").ipu(0)), 2, ("pipelined", 1, 2)),
])
def test_execution_strategies_and_replicas_reach_the_emulation(strategy, replicas, expected) -> None:
    # GIVEN a two-block model (IPUs 0 and 1 by BeginBlock), 4 micro-batches of 2 per call
    opts = poptorch.Options().replicationFactor(replicas).setExecutionStrategy(strategy)
    opts.Training.gradientAccumulation(4 // replicas)
    opts.TensorLocations.setOptimizerLocation(poptorch.TensorLocationSettings().useReplicatedTensorSharding(True))
    model = TwoBlocks()
    training = poptorch.trainingModel(model, opts)
    training(torch.randn(8, 8), torch.randint(0, 4, (8,)))
    # THEN the emulated run has the strategy, IPUs and replicas the options give
    s = training.compiled.summary
    assert (s.strategy, s.num_ipus, s.replicas) == expected
    assert training.compiled.captured.model.options.tensor_locations.replicated_tensor_sharding


def test_popart_options_the_examples_set_reach_the_emulation_or_are_refused_by_name() -> None:
    # GIVEN Graphcore's examples' PopART settings: pipeline recomputation and no outlining
    opts = poptorch.Options()
    opts._Popart.set("autoRecomputation", 3).set("enableOutlining", False).set("saveInitializersToFile", "w.onnx")
    o = opts.engine_options(training=True, micro_batch_size=1, precision="fp32", optimiser={}, recompute=False)
    # THEN the engine recomputes whole stages from their inputs and does not outline
    assert (o.recompute, o.recompute_checkpoints, o.enable_outlining) == (True, "stage", False)
    with pytest.raises(poptorch.UnsupportedError, match=r'^poptorch.Options._Popart.set\("virtualGraphMode"\) is not '):
        opts._Popart.set("virtualGraphMode", 1)


class Tokens(torch.nn.Module):
    """Weights read without an activation: position embeddings looked up by a constant index, a class token
    expanded over the batch."""

    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(20, 8), torch.nn.Embedding(5, 8)
        self.cls = torch.nn.Parameter(torch.zeros(1, 1, 8))
        self.fc = torch.nn.Linear(8, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        return self.fc(torch.cat([self.cls.expand(ids.shape[0], -1, -1), x], 1).mean(1))


def test_every_weight_is_counted_once_however_it_is_read(capsys) -> None:
    model = Tokens()
    inference = poptorch.inferenceModel(model)
    inference(torch.randint(0, 20, (4, 5)))
    captured = inference.compiled.captured.model
    # THEN the engine model holds the module's 20 x 8 + 5 x 8 + 8 + 8 x 3 + 3 = 235 weights
    assert captured.parameters == sum(p.numel() for p in model.parameters()) == 235
    assert [op.kind for op in captured.ops] == ["embedding", "add", "concat", "reduce", "matmul"]


@pytest.mark.parametrize(("source", "script"), [
    ("import poptorch\n", True),
    ("from poptorch import optim\n", True),
    ("def main():\n    import poptorch.optim\n", True),
    ("import poptorch\n\ndef build(options):\n    pass\n", False),  # an engine model file
    ("import torch\n", False),
    ("import poptorch\n(", False),  # not Python: the model-file path says what is wrong
])
def test_popvision_run_tells_a_poptorch_script_from_a_model_file(tmp_path: Path, source: str, script: bool) -> None:
    from engine.runner import is_poptorch_script

    path = tmp_path / "m.py"
    path.write_text(source)
    assert is_poptorch_script(str(path)) is script


class Transformer(torch.nn.Module):
    """PyTorch's own encoder layers, one block and IPU each (BeginBlock), a checkpoint after each, LAMB."""

    def __init__(self, layers: int = 2, hidden: int = 32, heads: int = 4, vocab: int = 50) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.layers = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, batch_first=True, activation="gelu")
            for _ in range(layers))
        for i, layer in enumerate(self.layers):
            poptorch.BeginBlock(layer, f"layer{i}", ipu_id=i)
        self.head = torch.nn.Linear(hidden, vocab)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor | None = None):
        x = self.embed(ids)
        for layer in self.layers:
            x = poptorch.recomputationCheckpoint(layer(x))
        logits = self.head(x)
        if labels is None:
            return logits
        return poptorch.identity_loss(torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten()),
                                      "none")


def test_pytorchs_transformer_layers_train_and_infer_with_every_op_named(recwarn) -> None:
    # GIVEN PyTorch's TransformerEncoderLayer: decomposed when training, its fused attention in inference
    torch.manual_seed(0)
    model = Transformer()
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(3)
    training = poptorch.trainingModel(model, opts, optimizer=poptorch.optim.LAMB(model.parameters()))
    ids = torch.randint(0, 50, (6, 8))
    first = training(ids, ids).item()
    for _ in range(5):
        last = training(ids, ids).item()
    inference = poptorch.inferenceModel(model.eval(), poptorch.Options().deviceIterations(2))
    assert inference(ids).shape == (6, 8, 50)
    # THEN LAMB lowers the loss, both captures name every op (no generic work, no warning), count every
    # weight once, recompute (the checkpoints) in training, and stage by the layers' IPUs
    assert last < first
    weights = sum(p.numel() for p in model.parameters())
    for compiled in (training.compiled, inference.compiled):
        assert not compiled.captured.generic
        assert compiled.captured.model.parameters == weights
        assert compiled.summary.num_ipus == 2
    assert training.compiled.captured.model.options.recompute
    assert [op.kind for op in inference.compiled.captured.model.ops][:5] == ["embedding", "matmul", "matmul",
                                                                             "softmax", "matmul"]
    assert not [w for w in recwarn if issubclass(w.category, poptorch.GenericOpsWarning)]


def test_a_distributed_process_loads_its_own_contiguous_share() -> None:
    # GIVEN 100 samples over 2 processes, batch 5: each process reads its half, in order
    dataset = torch.utils.data.TensorDataset(torch.arange(100.0))
    shares = []
    for process in (0, 1):
        opts = poptorch.Options()
        opts.Distributed.configureProcessId(process, 2)
        shares.append(torch.cat([x for (x,) in poptorch.DataLoader(opts, dataset, batch_size=5)]).tolist())
    assert shares == [list(range(50)), list(range(50, 100))]


class Unnamed(torch.nn.Module):
    """Two blocks given no names (PopTorch numbers them 0, 1), the second by BeginBlock."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), poptorch.BeginBlock(torch.nn.Linear(4, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with poptorch.Block():
            x = torch.relu(self.a(x))
        return self.b(x)


def test_unnamed_blocks_are_numbered_and_remove_blocks_leaves_one() -> None:
    model = Unnamed()
    inference = poptorch.inferenceModel(model)
    inference(torch.ones(2, 4))
    assert [(op.kind, op.block) for op in inference.compiled.captured.model.ops] == [
        ("matmul", "0"), ("relu", "0"), ("matmul", "1")]
    # WHEN the BeginBlock is removed: the ops after the first block stay in it
    poptorch.removeBlocks(model)
    again = poptorch.inferenceModel(model)
    again(torch.ones(2, 4))
    assert {op.block for op in again.compiled.captured.model.ops} == {"0"}


def test_the_optimisers_storage_types_reach_the_emulation_and_the_rest_leave_pytorchs_update() -> None:
    # GIVEN PopTorch's Adam with FP16 first moments and accumulators, and a loss scaling
    model = Regression()
    adam = poptorch.optim.Adam(model.parameters(), lr=0.1, first_order_momentum_accum_type=torch.half,
                               accum_type=torch.float16, loss_scaling=128.0, max_grad_norm=None)
    plain = Regression()
    reference = torch.optim.Adam(plain.parameters(), lr=0.1)
    training = poptorch.trainingModel(model, optimizer=adam)
    training(*batch(1))
    # THEN the emulated optimiser holds those types
    o = training.compiled.captured.model.options
    assert (o.optimiser, o.first_moment_type, o.accum_type, o.optimiser_state_type) == ("adam", "fp16", "fp16", "fp32")
    # AND the CPU's step is PyTorch's Adam step without the PopTorch arguments
    reference.zero_grad()
    ((plain.fc(batch(1)[0]) - batch(1)[1]) ** 2).mean().backward()
    reference.step()
    torch.testing.assert_close(model.fc.weight, plain.fc.weight)
    sgd = poptorch.optim.SGD(model.parameters(), lr=0.1, velocity_accum_type=torch.half, use_combined_accum=False)
    assert sgd.engine_options() == {"optimiser": "sgd", "optimiser_state_type": "fp16", "use_combined_accum": False}


def test_a_capture_writes_no_profile_for_the_models_it_runs_past(tmp_path: Path) -> None:
    from poptorch._script import capture_script

    # GIVEN a script whose options ask for profiles (enableProfiling), training before its inference model
    script = tmp_path / "both.py"
    script.write_text(f"""\
import torch
import poptorch

net = torch.nn.Sequential(torch.nn.Linear(4, 2))
opts = poptorch.Options().enableProfiling({str(tmp_path / "profiles")!r})
training = poptorch.trainingModel(torch.nn.Sequential(net, torch.nn.Flatten()), opts)
training.compile(torch.ones(2, 4))
""" + "poptorch.inferenceModel(net, opts)(torch.ones(2, 4))\n")
    # WHEN its inference model is captured (the training model compiles on the way)
    captured = capture_script(script, training=False)
    # THEN the capture is the inference model's, and nothing was written
    assert not captured.training and [op.kind for op in captured.model.ops] == ["matmul"]
    assert not (tmp_path / "profiles").exists()


def test_poptorch_strategies_convert_into_the_engines_layout() -> None:
    from engine.layout import Layout, StageSpec

    blocks, block_ipus = ["B1", "B2", "B3"], {"B1": 0, "B2": 0, "B3": 1}
    # GIVEN PopTorch's stages, one with its IPU left out (PopTorch puts it on the IPU of its position)
    piped = poptorch.PipelinedExecution(poptorch.Stage("B1", "B2").ipu(0), poptorch.Stage("B3"))
    # THEN the engine receives a plain Layout: B1, B2 on IPU 0, B3 on IPU 1
    assert piped.layout(blocks, block_ipus) == Layout("pipelined", [StageSpec(("B1", "B2"), 0), StageSpec("B3", 1)])
    # ... a ShardedExecution (a PipelinedExecution in PopTorch's class tree) is sharded all the same
    assert poptorch.ShardedExecution("B1", "B2", "B3").layout(blocks, block_ipus) == Layout.of(
        "sharded", "B1", "B2", "B3")
    # ... and without stages, PopTorch's SameAsIpu groups consecutive blocks on one IPU
    assert poptorch.PipelinedExecution().layout(blocks, block_ipus) == Layout(
        "pipelined", [StageSpec(("B1", "B2"), 0), StageSpec("B3", 1)])
    assert poptorch.PhasedExecution(poptorch.Phase("B1"), poptorch.Phase("B2", "B3")).layout(
        blocks, block_ipus).kind == "phased"
