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

# Liveness
LIVENESS_PLOT = "liveness-plot"
LIVENESS_PEAKS = "liveness-peaks"
LIVENESS_IPU = "liveness-ipu"
LIVENESS_STEP = "liveness-step"
LIVENESS_LIVE_TITLE = "liveness-live-title"
LIVENESS_LIVE = "liveness-live"

# Execution trace
TRACE_TIMELINE = "trace-timeline"
TRACE_LEVEL = "trace-level"
TRACE_RESET = "trace-reset"
TRACE_IPU = "trace-ipu"
TRACE_STEP = "trace-step"
TRACE_TILES = "trace-tiles"
TRACE_FIGURES = "trace-figures"

# Stages
STAGES_GANTT = "stages-gantt"
STAGES_FIGURES = "stages-figures"
STAGES_IMBALANCE = "stages-imbalance"
STAGES_SPLIT = "stages-split"
STAGES_SPLIT_TABLE = "stages-split-table"
STAGES_SPLIT_FIGURE = "stages-split-figure"
STAGES_SUMMARY = "stages-summary"

# Exchange
EXCHANGE_FIGURES = "exchange-figures"
EXCHANGE_MATRIX = "exchange-matrix"
EXCHANGE_MATRIX_VALUE = "exchange-matrix-value"
EXCHANGE_BANDWIDTH = "exchange-bandwidth"
EXCHANGE_KINDS = "exchange-kinds"
EXCHANGE_PHASES = "exchange-phases"
EXCHANGE_COSTLIEST = "exchange-costliest"

# Compare
COMPARE_HEADER = "compare-header"
COMPARE_FIGURES = "compare-figures"
COMPARE_MEMORY = "compare-memory"
COMPARE_PHASES = "compare-phases"
COMPARE_STAGES = "compare-stages"
COMPARE_TABLES = "compare-tables"

# What-if (a tune result)
WHATIF_HEADER = "whatif-header"
WHATIF_SCATTER = "whatif-scatter"
WHATIF_PARETO = "whatif-pareto"
WHATIF_DETAIL = "whatif-detail"
WHATIF_EMULATE = "whatif-emulate"
WHATIF_CANDIDATE = "whatif-candidate"  # Store: the clicked candidate's row
WHATIF_COMPARISON = "whatif-comparison"

# System (the host processes' timelines)
SYSTEM_FIGURES = "system-figures"
SYSTEM_NOTE = "system-note"  # the one line shown without system timeline files
SYSTEM_TIMELINE = "system-timeline"
SYSTEM_LEVEL = "system-level"
SYSTEM_RESET = "system-reset"
SYSTEM_TIME = "system-time"  # RadioItems: "relative" (from the first event) or "absolute" (wall clock) time
SYSTEM_WINDOW = "system-window"  # Store: the window shown, [start, end] ns since 1970
SYSTEM_PROCESSES = "system-processes"
