"""The analysis reads a run's schedule from the profile, not from the planner's rules (issue 36).

GIVEN manifests' ``run`` objects, WHEN ``format.schedule.run_schedule`` reads them, THEN a profile
that records the facts (schema 4) is read by what it records, and an older one by its other fields
as the writers of schema 1 to 3 decided them; and a new profile records what the planner decided.
"""

from __future__ import annotations

from popvision_py.format import open_profile
from popvision_py.format.schedule import run_schedule
from tests.engine.helpers import run_cli

FOUR_STAGES = [{"stage": k, "ipu": ipu, "blocks": [f"B{k}"]} for k, ipu in enumerate([0, 1, 1, 2, 0])]


def test_an_old_profile_reads_its_schedule_from_its_stages_and_batch():
    # GIVEN a schema-3 run: pipelined over IPUs 0, 1, 1, 2 and back to 0; 4 x GA 8 x 2 replicas, 1.5 samples an input
    run = {"strategy": "pipelined", "stages": FOUR_STAGES, "micro_batch_size": 4, "gradient_accumulation": 8,
           "replication_factor": 2, "packing_factor": 1.5}
    facts = run_schedule(run)
    # THEN stages 1 and 2 share IPU 1's position, the stage back on IPU 0 is a fourth position
    assert facts.runs_as_pipeline
    assert facts.pipeline_positions == (0, 1, 1, 2, 3)
    assert facts.pipeline_depth == 4
    assert facts.samples_per_step == 96  # 4 x 8 x 2 x 1.5
    # phased stages sharing an IPU run one after another; sharded never pipelines
    assert not run_schedule({"strategy": "phased", "stages": FOUR_STAGES[:3]}).runs_as_pipeline
    assert run_schedule({"strategy": "phased", "stages": FOUR_STAGES[:2]}).runs_as_pipeline
    assert not run_schedule({"strategy": "sharded", "stages": FOUR_STAGES[:2]}).runs_as_pipeline


def test_a_new_profile_is_read_by_what_it_records_not_by_a_rule():
    # GIVEN a run whose recorded facts no rule would give (a planner of other rules wrote it)
    run = {"strategy": "sharded", "stages": FOUR_STAGES[:2], "micro_batch_size": 4, "gradient_accumulation": 1,
           "replication_factor": 1, "runs_as_pipeline": True, "pipeline_positions": [0, 0], "samples_per_step": 7}
    facts = run_schedule(run)
    # THEN the analysis takes the record
    assert (facts.runs_as_pipeline, facts.pipeline_positions, facts.samples_per_step) == (True, (0, 0), 7)
    assert facts.pipeline_depth == 1
    # ... for the run's own stages; a stage list the manifest does not hold is derived from its IPUs
    assert facts.of_stages([0, 1]) == (True, [0, 0])
    assert facts.of_stages([0, 1, 2]) == (False, [0, 1, 2])


def test_the_emulator_records_the_schedule_the_planner_decided(tmp_path):
    # GIVEN mnist pipelined over its four IPUs, batch 4, GA 8, 2 replicas
    result = run_cli("run", "mnist", "--profile", "--profile-dir", str(tmp_path), "-q", "--no-ranges",
                     "--batch-size", "4", "--gradient-accumulation", "8", "--replicas", "2")
    assert result.exit_code == 0, result.output
    with open_profile(tmp_path / "profile.pop") as profile:
        run = profile.manifest["run"]
        assert profile.manifest["schema_version"] >= 4
    # THEN its manifest states the schedule: a pipeline, one position per IPU, 4 x 8 x 2 samples a step
    assert run["runs_as_pipeline"] is True
    assert run["pipeline_positions"] == [0, 1, 2, 3]
    assert run["samples_per_step"] == 64
