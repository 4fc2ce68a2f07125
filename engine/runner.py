"""Running a model end to end: resolve it, check the plan, compile, plan memory, schedule, report.

``emulate(RunRequest(...))`` is what ``popvision run`` calls. Everything a user can get wrong is a
``ConfigError`` raised before the profile is written; the profile is published only when complete.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import sys
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from popvision_py.errors import ConfigError, first_line

from engine.compiler import Compiled, compile_plan
from engine.instrument import RunSummary, summarise, write_profile
from engine.memory import plan_memory
from engine.model import Model
from engine.options import RunOptions
from engine.plan import Plan, make_plan, resolve_layout, runs_as_pipeline
from engine.prediction import Prediction, applicable, sensitivity
from engine.rules import pipeline_depth, pipeline_stages
from engine.scheduler import Schedule, schedule
from engine.layout import KINDS, Layout, StageSpec
from engine.zoo import zoo_entry

OPTION_NAMES = ("micro_batch_size", "device_iterations", "gradient_accumulation", "replication_factor", "precision",
                "partials", "mode", "recompute", "optimiser", "runs", "arch", "system", "available_memory_proportion",
                "tensor_sharding", "optimiser_state_type", "first_moment_type", "accum_type", "use_combined_accum",
                "enable_outlining", "recompute_checkpoints", "attention_serialisation", "host_processes", "host_input",
                "loader_workers", "persistent_workers")
# Bounds a run refuses beyond, before any work, unless the request lifts them (popvision run
# --max-trace-rows, --max-memory-gb): a mistyped size must be one sentence, not hours or the machine's memory.
MAX_TRACE_ROWS = 200_000_000
MAX_MEMORY_BYTES = 16 << 30
# Trace rows per op, pass and micro-batch (or inference iteration): 2.9 to 4.0 over the zoo's models.
TRACE_ROWS_PER_OP = 4
# The emulator's memory: a base, plus per op and tile (74 KB per op on 1,472 tiles measured, bert-base at
# 12 to 384 layers); a transformer layer is at most 16 ops.
BASE_BYTES = 256 << 20
BYTES_PER_OP_TILE = 64
OPS_PER_LAYER = 16
INT64_MAX = 2**63 - 1
# Tensor locations a model's DEFAULTS may set, like the options above.
LOCATION_NAMES = ("offload_optimiser", "offload_weights", "offload_activations", "replicated_tensor_sharding")


@dataclass
class RunRequest:
    """A run as the CLI states it; ``None`` means "the model's default"."""

    model: str
    options: dict[str, Any] = field(default_factory=dict)  # OPTION_NAMES -> value
    params: dict[str, Any] = field(default_factory=dict)  # the model's own parameters (zoo models)
    strategy: str | None = None  # pipelined, sharded, phased
    stages: str | None = None  # "B1,B2@0 B3..B5@1" (see parse_stages); "" is an error, not "default"
    offload_optimiser: bool | None = None
    offload_weights: bool | None = None
    offload_activations: bool | None = None
    replicated_tensor_sharding: bool | None = None
    assumptions: dict[str, Any] = field(default_factory=dict)  # see Assumptions.updated
    profile: str | Path | None = None
    progress: bool = False
    # The sensitivity pass (engine.prediction): a range on the throughput and the worst tile, and the
    # three-way fit verdict. Off, the summary has the central estimates only.
    ranges: bool = True
    max_trace_rows: int = MAX_TRACE_ROWS
    max_memory_bytes: int = MAX_MEMORY_BYTES
    # A PopTorch script's arguments (`popvision run script.py --emulate-only -- ARGS`); not None: the
    # model is a script, whose model is captured and emulated without running its loop.
    script_args: Sequence[str] | None = None
    # The summary's idle share and FLOP utilisation from the compiled and scheduled run, as the
    # analysis computes them (``popvision_py.run_figures.emulated_figures``, passed in from above).
    figures: Callable[[Compiled, Schedule], dict[str, float]] | None = None


@dataclass
class ModelSource:
    """Where a model comes from: its build function and option defaults."""

    name: str
    build: Any
    defaults: dict[str, Any]
    inference_defaults: dict[str, Any]
    zoo: bool
    script: bool = False  # a PopTorch script's captured model (poptorch._script.script_source)


def is_poptorch_script(model: str) -> bool:
    """A ``.py`` file that imports poptorch and defines no ``build``: a PopTorch program, which
    ``popvision run`` runs as a script (an engine model file defines ``build(options)``)."""
    path = Path(model)
    if path.suffix != ".py" or not path.is_file():
        return False
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError):
        return False  # load_model_source says what is wrong with the file
    if any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "build" for node in tree.body):
        return False
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if any(name.split(".")[0] == "poptorch" for name in names):
            return True
    return False


# What loads a PopTorch script's captured model: ``load_script(path, args, mode) -> ModelSource``. The
# loader lives above the engine (``popvision_py.scripts.load_script``, which runs the script with
# popvision's ``poptorch``); a caller that runs scripts passes it in.
ScriptLoader = Callable[[str, Sequence[str], str], "ModelSource"]


def load_model_source(model: str, request: RunRequest | None = None,
                      load_script: ScriptLoader | None = None) -> ModelSource:
    """A zoo entry by name, a user's Python file defining ``build(options) -> Model``, or a PopTorch
    script's captured model, loaded by ``load_script`` (the request's mode picks its training or
    inference model, its ``script_args`` are the script's arguments; the script's poptorch.Options
    are the defaults)."""
    args = None if request is None or request.script_args is None else tuple(request.script_args)
    if is_poptorch_script(model):
        if load_script is None:
            raise ConfigError(f"{model} is a PopTorch script; run it with `popvision run {model}` (the engine "
                              f"alone does not run scripts).")
        return load_script(model, args or (), (request.options.get("mode") if request else None) or "training")
    if args is not None:
        raise ConfigError(f"Script {model} does not exist." if model.endswith(".py") and not Path(model).is_file() else
                          f"{model} is not a PopTorch script (a .py that imports poptorch and defines no build); "
                          f"--emulate-only and arguments after -- apply to scripts only.")
    if model.endswith(".py") or Path(model).is_file():
        path = Path(model)
        if not path.is_file():
            raise ConfigError(f"Model file {model} does not exist.")
        module_name = f"popvision_user_model_{abs(hash(str(path.resolve())))}"
        try:
            spec = importlib.util.spec_from_file_location(module_name, path)
            if spec is None or spec.loader is None:
                raise ImportError("not a Python module")
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
        except ConfigError:
            raise
        except BaseException as exc:  # noqa: BLE001 - any failure of the user's code is one sentence
            if isinstance(exc, KeyboardInterrupt):
                raise
            sys.modules.pop(module_name, None)
            raise ConfigError(f"Model file {model} failed to import: {type(exc).__name__}: {first_line(exc)}") from None
        build = getattr(module, "build", None)
        if not callable(build):
            raise ConfigError(f"Model file {model} defines no build(options) function (nor imports poptorch, "
                              f"which would make it a PopTorch script).")
        defaults = _defaults(module, "DEFAULTS", model)
        inference = _defaults(module, "INFERENCE_DEFAULTS", model)
        return ModelSource(path.stem, build, defaults, inference, zoo=False)
    entry = zoo_entry(model)
    return ModelSource(entry.name, entry, dict(entry.defaults), dict(entry.inference_defaults), zoo=True)


def _defaults(module: Any, name: str, model: str) -> dict[str, Any]:
    """A model file's ``DEFAULTS`` or ``INFERENCE_DEFAULTS``: a mapping of option names, or none."""
    value = getattr(module, name, None)
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise ConfigError(f"Model file {model} sets {name} to a {type(value).__name__}; it must be a dict of "
                          f"option names to values, e.g. {{\"micro_batch_size\": 8}}.")
    return dict(value)


def parse_stages(text: str, kind: str, blocks: Sequence[str], model: str = "the model") -> Layout:
    """``"B1,B2@0 B3@1 B4@2"``: stages separated by spaces (or ``;``), blocks by commas, ``@n`` the
    IPU (stage k goes on IPU k when ``@n`` is left out). ``A..B`` stands for every block of
    ``blocks`` (the model's, in model order) from A to B inclusive, as ``popvision models`` prints
    partitions. Names are checked against the model later (``make_plan``); range ends here."""
    groups = [g for g in text.replace(";", " ").split() if g]
    if not groups:
        raise ConfigError(f"--stages is empty ({text!r}); write e.g. \"B1,B2@0 B3@1\" or leave it out.")
    order = {b: i for i, b in enumerate(blocks)}
    stages = []
    for k, group in enumerate(groups):
        blocks_text, at, ipu_text = group.partition("@")
        names = [b for b in blocks_text.split(",") if b]
        if not names:
            raise ConfigError(f"Stage {k} of --stages ({group!r}) names no block.")
        if at and not ipu_text:
            raise ConfigError(f"Stage {k} of --stages ({group!r}) ends in '@' with no IPU number after it.")
        try:
            ipu = int(ipu_text) if ipu_text else k
        except ValueError:
            raise ConfigError(f"Stage {k} of --stages ({group!r}) has IPU {ipu_text!r}, not a number.") from None
        expanded = [b for name in names for b in _block_range(name, order, blocks, k, group, model)]
        stages.append(StageSpec(tuple(expanded), ipu))
    return Layout(kind, stages)


def _block_range(name: str, order: dict[str, int], blocks: Sequence[str], k: int, group: str,
                 model: str) -> Sequence[str]:
    """The blocks ``name`` stands for: itself, or for ``A..B`` the model's blocks from A to B."""
    if name in order or ".." not in name:
        return [name]
    first, _, last = name.partition("..")
    if not first or not last:
        raise ConfigError(f"Stage {k} of --stages ({group!r}): the range {name} needs a block at both ends, "
                          f"as in {f'{blocks[0]}..{blocks[-1]}' if blocks else 'A..B'}.")
    for end, label in ((first, "starts"), (last, "ends")):
        if end not in order:
            raise ConfigError(f"Stage {k} of --stages ({group!r}): the range {name} {label} at {end!r}, which is not "
                              f"a block of {model} (its blocks are {', '.join(blocks)}).")
    if order[first] > order[last]:
        raise ConfigError(f"Stage {k} of --stages ({group!r}): the range {name} is reversed ({last} comes before "
                          f"{first} in {model}); write {last}..{first} or list the blocks.")
    return blocks[order[first]:order[last] + 1]


def build_options(source: ModelSource, request: RunRequest) -> RunOptions:
    """The run's options from the model's defaults, then the request's choices."""
    given = {k: v for k, v in request.options.items() if v is not None}
    mode = given.get("mode", "training")
    values = dict(source.defaults)
    preset = request.params.get("preset")
    if source.zoo and preset in source.build.preset_defaults:
        values.update(source.build.preset_defaults[preset])
    if mode == "inference":
        values.update(source.inference_defaults)
        values["gradient_accumulation"] = 1
    values.update(given)
    for name in LOCATION_NAMES:
        if getattr(request, name) is not None:
            values[name] = getattr(request, name)
    unknown = sorted(set(values) - set(OPTION_NAMES) - set(LOCATION_NAMES))
    if unknown:
        raise ConfigError(f"Unknown option {unknown[0]!r} in the model's defaults.")
    options = RunOptions(**{k: v for k, v in values.items() if k in OPTION_NAMES})
    locations = options.tensor_locations
    locations.optimiser_on_chip = not values.get("offload_optimiser", False)
    locations.weights_on_chip = not values.get("offload_weights", False)
    locations.activations_on_chip = not values.get("offload_activations", False)
    locations.replicated_tensor_sharding = bool(values.get("replicated_tensor_sharding", False))
    options.validate()
    return options


def location_options(locations: Any) -> dict[str, bool]:
    """``options.tensor_locations`` as the run options that set them (``LOCATION_NAMES``): the inverse of
    ``build_options``' tensor-location lines."""
    return {"offload_optimiser": not locations.optimiser_on_chip, "offload_weights": not locations.weights_on_chip,
            "offload_activations": not locations.activations_on_chip,
            "replicated_tensor_sharding": bool(locations.replicated_tensor_sharding)}


def build_model(source: ModelSource, options: RunOptions, params: dict[str, Any]) -> Model:
    """Call the model's build function; a user's failing build is one sentence."""
    params = {k: v for k, v in params.items() if v is not None}
    if source.zoo:
        resolved = source.build.resolve_params(params)
        return source.build.build(options, **resolved)
    if params:
        raise ConfigError(f"Model parameters ({', '.join(params)}) apply to zoo models only; "
                          f"{source.name} sets its own in build().")
    try:
        model = source.build(options)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's code
        raise ConfigError(f"Model {source.name}'s build() failed: {type(exc).__name__}: {first_line(exc)}") from None
    if not isinstance(model, Model):
        raise ConfigError(f"Model {source.name}'s build() returned {type(model).__name__}, not an engine Model.")
    return model


def estimate(ops: int, tiles_per_ipu: int, options: RunOptions) -> tuple[int, int]:
    """About how many trace rows a run writes and how many bytes emulating it takes."""
    passes = 3 if options.training else 1  # forward, backward, weight update
    rows = (TRACE_ROWS_PER_OP * ops * passes * options.gradient_accumulation * options.device_iterations
            * options.runs)
    return rows, BASE_BYTES + BYTES_PER_OP_TILE * ops * tiles_per_ipu


def check_bounds(request: RunRequest, ops: int, tiles_per_ipu: int, options: RunOptions) -> None:
    """ConfigError, naming the estimate and the flag that lifts the limit, for a run beyond the bounds."""
    rows, memory = estimate(ops, tiles_per_ipu, options)
    if memory > request.max_memory_bytes:
        raise ConfigError(f"Emulating this run would take about {memory / 2**30:,.1f} GiB of memory ({ops:,} ops "
                          f"on {tiles_per_ipu:,} tiles per IPU), over the limit of "
                          f"{request.max_memory_bytes / 2**30:,.1f} GiB; --max-memory-gb raises it.")
    if rows > request.max_trace_rows:
        passes = 3 if options.training else 1
        raise ConfigError(f"This run would write about {rows:,} trace rows ({ops:,} ops x {passes} pass(es) x "
                          f"{options.gradient_accumulation:,} micro-batches x {options.device_iterations:,} "
                          f"iterations x {options.runs:,} runs), over the limit of {request.max_trace_rows:,}; "
                          f"--max-trace-rows raises it.")


def _check_sizes(request: RunRequest) -> None:
    """Sizes beyond 64-bit integers are refused, and a layer count is bounded before the model is built."""
    for name, value in {**request.options, **request.params}.items():
        if isinstance(value, int) and not isinstance(value, bool) and not -INT64_MAX - 1 <= value <= INT64_MAX:
            raise ConfigError(f"{name.replace('_', ' ').capitalize()} {value} is beyond 64-bit integers.")
    layers = request.params.get("layers")
    if isinstance(layers, int) and layers > 0:
        # Building the model is itself linear in its layers: bound it from the layer count first.
        check_bounds(request, OPS_PER_LAYER * layers, 1472, RunOptions(gradient_accumulation=1))


def _check_ipus(request: RunRequest, model: Model, layout: Layout) -> None:
    """--ipus that the model's partition cannot use (more IPUs than it has blocks) is refused, not
    quietly lowered to what the partition uses."""
    asked = request.params.get("ipus")
    used = len(set(layout.ipus))
    if request.stages is None and isinstance(asked, int) and asked > used:
        raise ConfigError(f"--ipus {asked:,} asks for more IPUs than {model.name}'s {len(model.blocks)} blocks "
                          f"can be split over; its partition uses at most {used}, so ask for --ipus {used} or fewer.")


def prepare(request: RunRequest, load_script: ScriptLoader | None = None) -> Plan:
    """Resolve and check everything a run needs; raises ConfigError before any work. ``load_script``
    loads a PopTorch script's model (see ``load_model_source``)."""
    _check_sizes(request)
    source = load_model_source(request.model, request, load_script)
    options = build_options(source, request)
    if request.strategy is not None and request.strategy not in KINDS:
        raise ConfigError(f"Unknown strategy {request.strategy!r}; choose pipelined, sharded or phased.")
    model = build_model(source, options, request.params)
    if request.stages is not None:
        kind = request.strategy or (model.default_layout.kind if model.default_layout else "pipelined")
        layout = parse_stages(request.stages, kind, model.blocks, model.name)
    else:
        layout = resolve_layout(model, options, request.strategy)
    least = pipeline_stages(pipeline_depth(layout.ipus), True)  # a training pipeline's
    if (runs_as_pipeline(layout.kind, layout.ipus) and options.training
            and request.options.get("gradient_accumulation") is None and options.gradient_accumulation < least):
        # A default (not the user's choice) too small for the partition: use the least that runs.
        options.gradient_accumulation = least
    _check_ipus(request, model, layout)
    plan = make_plan(model, options, layout, assumptions=request.assumptions or None)
    check_bounds(request, sum(len(s.ops) for s in plan.stages), plan.target.tiles, plan.options)
    return dataclasses.replace(plan, request=request_record(request, source))


def request_record(request: RunRequest, source: ModelSource) -> dict[str, Any]:
    """The model and the options the request set (``None`` left out), under ``popvision run``'s option names."""
    given: dict[str, Any] = {k: v for k, v in {**request.params, **request.options}.items() if v is not None}
    for name in ("strategy", "stages", *LOCATION_NAMES):
        if getattr(request, name) is not None:
            given[name] = getattr(request, name)
    if request.assumptions:
        given["assume"] = dict(request.assumptions)
    if source.script:
        return script_record(request.model, request.script_args or (), given)
    model = request.model if source.zoo else str(Path(request.model).resolve())
    return {"model": model, "options": given}


def script_record(script: str | Path, args: Sequence[str], options: dict[str, Any]) -> dict[str, Any]:
    """The request that emulates a PopTorch script's model with ``options``: ``popvision run SCRIPT
    --emulate-only OPTIONS -- ARGS``. The path is absolute, so the record runs from any directory."""
    return {"model": str(Path(script).resolve()), "options": dict(options), "script_args": [str(a) for a in args],
            "emulate_only": True}


def emulate(request: RunRequest, load_script: ScriptLoader | None = None) -> RunSummary:
    """Run the emulator; write the profile if ``request.profile`` names a path. Returns the summary.
    ``load_script`` loads a PopTorch script's model (``popvision_py.scripts.load_script``)."""
    return emulate_plan(prepare(request, load_script), request)


def emulate_plan(plan: Plan, request: RunRequest) -> RunSummary:
    """Emulate an already checked plan (``prepare``'s, or one built from a captured model) as
    ``emulate`` does; ``request`` gives the profile path, progress and bounds."""
    check_bounds(request, sum(len(s.ops) for s in plan.stages), plan.target.tiles, plan.options)
    try:
        with warnings.catch_warnings():
            # NumPy only warns when a size overflows int64 or a float too big for one is cast: that is
            # a wrong figure, never a result.
            warnings.filterwarnings("error", r"(overflow encountered|invalid value encountered in cast)",
                                    RuntimeWarning)
            return _emulate(plan, request)
    except (OverflowError, RuntimeWarning):
        raise ConfigError("This run's sizes overflow 64-bit arithmetic (a batch, accumulation or model size "
                          "far beyond any IPU system); give smaller ones.") from None


def pinned_assumptions(request: RunRequest) -> set[str]:
    """The assumptions the request sets (``--assume``): known, so left out of the ranges."""
    return {str(name) for name in request.assumptions}


def _emulate(plan: Plan, request: RunRequest) -> RunSummary:
    ipus = plan.num_ipus
    writing = 3 if request.profile else 0
    pinned = pinned_assumptions(request)
    varied = len(list(applicable(plan, pinned))) if request.ranges else 0
    with tqdm(total=2 * ipus + 1 + varied + writing, desc=f"Emulating {plan.model.name}", unit="step",
              file=sys.stderr, disable=not request.progress, leave=False) as bar:
        compiled = compile_plan(plan, progress=lambda: bar.update(1))
        memories = []
        for prog in compiled.programs:
            memories.append(plan_memory(compiled, prog))
            bar.update(1)
        sched = schedule(compiled)
        bar.update(1)
        summary = summarise(compiled, memories, sched)
        if request.figures is not None:
            summary.set_figures(request.figures(compiled, sched))
        ranging = _Background(lambda step: sensitivity(compiled, memories, sched.total_cycles, pinned,
                                                       progress=lambda: (step(), bar.update(1))))
        if request.ranges:
            bar.set_description(f"Ranging {plan.model.name}")
            # The pass is Python and the writer's encoding is not: run together, they use both cores.
            ranging.start(background=request.profile is not None)
        try:
            if request.profile:
                write_profile(request.profile, compiled, memories, sched, progress=lambda _: bar.update(1),
                              prediction=ranging.result)
                summary.profile = str(request.profile)
            found = ranging.result()
        finally:
            ranging.stop()  # a write that failed or was interrupted: the pass ends at its next assumption
        if found is not None:
            summary.set_prediction(found)
    return summary


class _Stopped(Exception):
    """The background work was told to stop."""


class _Background:
    """``work(step)`` run on a thread, or in line when its result is asked for; ``step`` raises once
    ``stop`` was called, so the thread ends at its next step rather than outlive the run."""

    def __init__(self, work: Callable[[Callable[[], None]], Prediction]) -> None:
        self._work = work
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._outcome: list[tuple[bool, Any]] = []
        self._started = False

    def _step(self) -> None:
        if self._stopping.is_set():
            raise _Stopped

    def _run(self) -> None:
        try:
            self._outcome.append((True, self._work(self._step)))
        except BaseException as exc:  # handed to result(), which raises it
            self._outcome.append((False, exc))

    def start(self, background: bool) -> None:
        self._started = True
        if background:
            self._thread = threading.Thread(target=self._run, name="popvision-ranges", daemon=True)
            self._thread.start()

    def result(self) -> Prediction | None:
        """The work's result (None if it was never started), or its error raised here."""
        if not self._started:
            return None
        if self._thread is not None:
            self._thread.join()
        elif not self._outcome:
            self._run()
        ok, value = self._outcome[0]
        if not ok:
            raise value
        return value

    def stop(self) -> None:
        """Have the thread stop at its next step, and wait for it."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
