"""Every component id of the dashboard, in one place, so pages, callbacks and tests agree."""

# The shell
PROFILE = "profile-choice"  # RadioItems: which profile ("a" or "b") the pages show
NAV = "nav"

# Summary and insights
SUMMARY_FIGURES = "summary-figures"
SUMMARY_RANGES = "summary-ranges"  # the ranges panel: throughput range, fit verdict, their drivers (none without)
SUMMARY_THROUGHPUT_DRIVERS = "summary-throughput-drivers"
SUMMARY_WORST_TILE_DRIVERS = "summary-worst-tile-drivers"
SUMMARY_INSIGHTS = "summary-insights"
SUMMARY_TIME = "summary-time"
SUMMARY_MEMORY = "summary-memory"
SUMMARY_VERIFY = "summary-verify"  # pattern id {"type": SUMMARY_VERIFY, "index": row of the insights}
SUMMARY_VERIFIED = "summary-verified"  # the same, where the fix's measured effect appears
SUMMARY_TIME_TITLE = "summary-time-title"
SUMMARY_MEMORY_TITLE = "summary-memory-title"
SUMMARY_SOURCE = "summary-source"  # an imported profile: where it came from (run.import)
# the tile insights (analysis/findings/insights.py): memory over tiles in bins, the fullest tiles, FP32 variables
SUMMARY_TILE_INSIGHTS = "summary-tile-insights"  # their panels (hidden for an imported trace: a rank has no tiles)
SUMMARY_TILE_HISTOGRAM = "summary-tile-histogram"
SUMMARY_FULLEST = "summary-fullest"
SUMMARY_FP32 = "summary-fp32"
SUMMARY_FP32_TABLE = "summary-fp32-table"

# Memory
MEMORY_IPU = "memory-ipu"
MEMORY_FIGURES = "memory-figures"
MEMORY_TILE_MAP = "memory-tile-map"
MEMORY_CATEGORIES = "memory-categories"
MEMORY_HISTOGRAM = "memory-histogram"
MEMORY_OOM = "memory-oom"
MEMORY_TILE_TITLE = "memory-tile-title"
MEMORY_TILE_BREAKDOWN = "memory-tile-breakdown"
MEMORY_TILE_VARIABLES = "memory-tile-variables"
MEMORY_DESCRIPTION = "memory-description"
MEMORY_TILES_NOTE = "memory-tiles-note"  # an imported trace: the section saying a rank has no tiles
MEMORY_NO_TILES = "memory-no-tiles"  # ... its one line
MEMORY_TILE_VIEWS = "memory-tile-views"  # the tile map and selected tile (hidden for an imported trace)
MEMORY_VARIABLES_SECTION = "memory-variables-section"
MEMORY_HISTOGRAM_SECTION = "memory-histogram-section"
MEMORY_OOM_SECTION = "memory-oom-section"
MEMORY_GRID = "memory-grid"
MEMORY_CATEGORIES_TITLE = "memory-categories-title"
MEMORY_CATEGORIES_NOTE = "memory-categories-note"
# Memory in depth: the map's colouring, a variable's footprint, the selected tile's tabs, the fullest tiles over steps
MEMORY_COLOUR_BY = "memory-colour-by"
MEMORY_VARIABLE = "memory-variable"
MEMORY_TILE_INPUT = "memory-tile-input"
MEMORY_SELECTED = "memory-selected"  # store: {"ipu": ..., "tile": ...} of the tile shown
MEMORY_TILE_TABS = "memory-tile-tabs"
MEMORY_TAB_COMPUTE = "memory-tab-compute"
MEMORY_TAB_VERTICES = "memory-tab-vertices"
MEMORY_TAB_EXCHANGES = "memory-tab-exchanges"
MEMORY_WORST_STEPS = "memory-worst-steps"
MEMORY_WORST_SECTION = "memory-worst-section"

# Liveness
LIVENESS_PLOT = "liveness-plot"
LIVENESS_PEAKS = "liveness-peaks"
LIVENESS_IPU = "liveness-ipu"
LIVENESS_STEP = "liveness-step"
LIVENESS_LIVE_TITLE = "liveness-live-title"
LIVENESS_LIVE = "liveness-live"
LIVENESS_DESCRIPTION = "liveness-description"
LIVENESS_PEAKS_TITLE = "liveness-peaks-title"
LIVENESS_IPU_LABEL = "liveness-ipu-label"
LIVENESS_PLOT_TITLE = "liveness-plot-title"
LIVENESS_LIVE_SECTION_TITLE = "liveness-live-section-title"

# Execution trace
TRACE_TIMELINE = "trace-timeline"
TRACE_LEVEL = "trace-level"
TRACE_RESET = "trace-reset"
TRACE_IPU = "trace-ipu"
TRACE_STEP = "trace-step"
TRACE_TILES = "trace-tiles"
TRACE_FIGURES = "trace-figures"
TRACE_DESCRIPTION = "trace-description"
TRACE_TIMELINE_TITLE = "trace-timeline-title"
TRACE_TILES_SECTION = "trace-tiles-section"
TRACE_TILES_NOTE = "trace-tiles-note"  # an imported trace: one line instead of the cycles per tile
TRACE_NO_TILES = "trace-no-tiles"
# the tiles in time (chosen tiles as BSP rows) and the tile balance
TRACE_ROWS = "trace-rows"  # past MANY_RANKS IPUs, the rows a box chose: [first, last + 1], or None (a heat map)
TRACE_WINDOW = "trace-window"  # the window both time lines show: [start, end] cycles, or None for the run
TRACE_TILE_CHOICE = "trace-tile-choice"
TRACE_TILE_LEVEL = "trace-tile-level"
TRACE_TILE_TIMELINE = "trace-tile-timeline"
TRACE_BALANCE_SCOPE = "trace-balance-scope"

# Stages
STAGES_GANTT = "stages-gantt"
STAGES_FIGURES = "stages-figures"
STAGES_IMBALANCE = "stages-imbalance"
STAGES_SPLIT = "stages-split"
STAGES_SPLIT_TABLE = "stages-split-table"
STAGES_SPLIT_FIGURE = "stages-split-figure"
STAGES_SUMMARY = "stages-summary"
STAGES_DESCRIPTION = "stages-description"
STAGES_GANTT_TITLE = "stages-gantt-title"
STAGES_IMBALANCE_TITLE = "stages-imbalance-title"
STAGES_SPLIT_SECTION = "stages-split-section"
STAGES_SPLIT_NOTE = "stages-split-note"  # an imported trace: one line instead of the suggested split
STAGES_NO_BLOCKS = "stages-no-blocks"
STAGES_PIPELINE_NOTE = "stages-pipeline-note"  # an imported trace of data parallelism: no pipeline, in one line
STAGES_NO_PIPELINE = "stages-no-pipeline"
STAGES_GANTT_SECTION = "stages-gantt-section"
STAGES_IMBALANCE_SECTION = "stages-imbalance-section"

# Exchange
EXCHANGE_FIGURES = "exchange-figures"
EXCHANGE_MATRIX = "exchange-matrix"
EXCHANGE_MATRIX_VALUE = "exchange-matrix-value"
EXCHANGE_BANDWIDTH = "exchange-bandwidth"
EXCHANGE_KINDS = "exchange-kinds"
EXCHANGE_PHASES = "exchange-phases"
EXCHANGE_COSTLIEST = "exchange-costliest"
EXCHANGE_DESCRIPTION = "exchange-description"
EXCHANGE_PHASES_TITLE = "exchange-phases-title"
EXCHANGE_COMMUNICATION_SECTION = "exchange-communication-section"  # an imported trace's communication per rank
EXCHANGE_COMMUNICATION = "exchange-communication"
EXCHANGE_COMMUNICATION_TABLE = "exchange-communication-table-slot"
EXCHANGE_COSTLIEST_TITLE = "exchange-costliest-title"
EXCHANGE_COSTLIEST_NOTE = "exchange-costliest-note"
EXCHANGE_COLLECTIVES_SECTION = "exchange-collectives-section"  # a GPU trace's collectives per process group
EXCHANGE_COLLECTIVES = "exchange-collectives"

# Compare
COMPARE_HEADER = "compare-header"
COMPARE_FIGURES = "compare-figures"
COMPARE_MEMORY = "compare-memory"
COMPARE_PHASES = "compare-phases"
COMPARE_STAGES = "compare-stages"
COMPARE_TABLES = "compare-tables"
COMPARE_MEMORY_TITLE = "compare-memory-title"
COMPARE_STAGES_TITLE = "compare-stages-title"

# What-if (a tune result)
WHATIF_HEADER = "whatif-header"
WHATIF_SCATTER = "whatif-scatter"
WHATIF_PARETO = "whatif-pareto"
WHATIF_DETAIL = "whatif-detail"
WHATIF_EMULATE = "whatif-emulate"
WHATIF_CANDIDATE = "whatif-candidate"  # Store: the clicked candidate's row
WHATIF_COMPARISON = "whatif-comparison"

# System (the host processes' timelines)
SYSTEM_DESCRIPTION = "system-description"
SYSTEM_EVENTS_NOTE = "system-events-note"
SYSTEM_FIGURES = "system-figures"
SYSTEM_NOTE = "system-note"  # the one line shown without system timeline files
SYSTEM_TIMELINE = "system-timeline"
SYSTEM_LEVEL = "system-level"
SYSTEM_RESET = "system-reset"
SYSTEM_TIME = "system-time"  # RadioItems: "relative" (from the first event) or "absolute" (wall clock) time
SYSTEM_WINDOW = "system-window"  # Store: the window shown, [start, end] ns since 1970
SYSTEM_PROCESSES = "system-processes"

# Program tree
PROGRAMS_DESCRIPTION = "programs-description"
PROGRAMS_FIGURES = "programs-figures"
PROGRAMS_IPU = "programs-ipu"  # Dropdown: an IPU, or "all"
PROGRAMS_SEARCH = "programs-search"
PROGRAMS_FOUND = "programs-found"  # how many nodes a search matched
PROGRAMS_TREE = "programs-tree"
PROGRAMS_SECTION = "programs-section"
PROGRAMS_NOTE = "programs-note"  # an imported trace: the section saying it has no compiled program
PROGRAMS_NO_PROGRAM = "programs-no-program"  # ... its one line
# Operations (each op's cycles, FLOPs and memory; by op, block or layer)
OPERATIONS_DESCRIPTION = "operations-description"
OPERATIONS_FIGURES = "operations-figures"
OPERATIONS_GROUP = "operations-group"  # RadioItems: "op", "block" or "layer"
OPERATIONS_TABLE = "operations-table"  # DataTable: sortable and filterable; a clicked row is the selection
OPERATIONS_TABLE_NOTE = "operations-table-note"
OPERATIONS_TRACE = "operations-trace"  # one iteration of the execution trace, the selection's executions marked
OPERATIONS_TRACE_NOTE = "operations-trace-note"
OPERATIONS_SELECTED = "operations-selected"  # what is selected, in words
OPERATIONS_VARIABLES = "operations-variables"
# The Stages page of an imported pipeline: its critical path across ranks, culprits and what-ifs
STAGES_CRITICAL_SECTION = "stages-critical-section"
STAGES_CRITICAL_CARDS = "stages-critical-cards"
STAGES_CRITICAL_CULPRITS = "stages-critical-culprits"
STAGES_CRITICAL_WHATIF = "stages-critical-whatif"
STAGES_WHATIF_SCHEDULE = "stages-whatif-schedule"
STAGES_WHATIF_MICRO_BATCHES = "stages-whatif-micro-batches"
STAGES_WHATIF_RUN = "stages-whatif-run"
STAGES_WHATIF_ANSWER = "stages-whatif-answer"
WHATIF_DESCRIPTION = "whatif-description"
WHATIF_SCATTER_TITLE = "whatif-scatter-title"
WHATIF_SCATTER_NOTE = "whatif-scatter-note"
WHATIF_PARETO_TITLE = "whatif-pareto-title"
WHATIF_PARETO_NOTE = "whatif-pareto-note"
TRACE_CRITICAL_SECTION = "trace-critical-section"  # an imported pipeline: one step's critical path across ranks
TRACE_CRITICAL = "trace-critical"
# GPU (a GPU trace's kernels: each rank's streams over time, the breakdowns per rank, the kernels)
GPU_NOTE = "gpu-note"  # the one sentence shown where the profile holds no GPU kernel
GPU_CONTENT = "gpu-content"  # everything else (hidden then)
GPU_FIGURES = "gpu-figures"
GPU_RANKS = "gpu-ranks"  # Dropdown (multi): the ranks whose streams are drawn
GPU_RANKS_BOX = "gpu-ranks-box"  # the picker and its label (hidden for one rank)
GPU_TIMELINE = "gpu-timeline"
GPU_LEVEL = "gpu-level"
GPU_RESET = "gpu-reset"
GPU_TEMPORAL = "gpu-temporal"
GPU_KERNEL_TYPES = "gpu-kernel-types"
GPU_OVERLAP = "gpu-overlap"
GPU_BY_RANK = "gpu-by-rank"
GPU_KERNELS = "gpu-kernels"  # DataTable: each rank's costliest kernels by name, sortable
