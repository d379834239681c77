from pathlib import Path

import pytest

from agent.errors import UserError
from agent.settings import Settings
from agent.timing.budget import default_budget_file, load_budget, load_eval_limits


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "budget.yaml"
    path.write_text(text)
    return path


def test_packaged_budget_is_the_default_and_loads_both_profiles():
    assert Settings().budget_file == default_budget_file()
    cpu = load_budget(default_budget_file())
    assert cpu.name == "cpu" and cpu.stages["voice_to_voice"].p95 == 800
    gpu = load_budget(default_budget_file(), "gpu")
    assert gpu.stages["voice_to_voice"].p95 < cpu.stages["voice_to_voice"].p95


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("profiles: {cpu: {voice_to_voice: {p50: 1}, bogus: {p50: 3}}}", "unknown stage(s) bogus"),
        ("profiles: {cpu: {voice_to_voice: {p50: -5}}}", "greater than 0"),
        ("profiles: {cpu: {voice_to_voice: {p50: fast}}}", "valid number"),
        ("profiles: {cpu: {voice_to_voice: {p99: 5}}}", "p99"),
        ("profiles: {cpu: {llm_ttft: {p50: 5}}}", "voice_to_voice must have a budget"),
        ("profiles: [1, 2]", "`profiles:` mapping"),
        ("profiles: {cpu: {voice_to_voice: {p50: 1}}", "not valid YAML"),
        ("profiles:\n  cpu: {voice_to_voice: {p50: 1}}\n  cpu: {}\n", "the key 'cpu' twice"),
    ],
)
def test_bad_budget_files_are_rejected_with_a_clear_line(tmp_path, text, message):
    with pytest.raises(UserError) as info:
        load_budget(write(tmp_path, text))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_unknown_profile_names_the_known_ones(tmp_path):
    path = write(tmp_path, "profiles: {cpu: {voice_to_voice: {p95: 800}}}")
    with pytest.raises(UserError, match="no profile 'gpu' .*profiles: cpu"):
        load_budget(path, "gpu")


def test_check_says_by_how_much_each_stage_is_over(tmp_path):
    budget = load_budget(
        write(
            tmp_path, "profiles: {cpu: {voice_to_voice: {p50: 500, p95: 800}, llm_ttft: {p50: 80}}}"
        )
    )
    fine = budget.check({"voice_to_voice": [400, 450, 700], "llm_ttft": [50, 60]})
    assert fine == []
    slow = budget.check({"voice_to_voice": [600, 650, 900], "llm_ttft": [50, 60]})
    assert slow == [
        "voice_to_voice p50 650 ms, budget 500 ms: 150 ms over (p95 875 ms: 75 ms over)"
    ]
    only_p95 = budget.check({"voice_to_voice": [400, 450, 1000], "llm_ttft": [50, 60]})
    assert only_p95 == ["voice_to_voice p95 945 ms, budget 800 ms: 145 ms over"]
    assert budget.turn_verdicts({"voice_to_voice": 900.0, "llm_ttft": None}) == {
        "voice_to_voice": "fail",
        "llm_ttft": None,
    }


def test_the_eval_gate_counts_phrases_heard_twice():
    limits = load_eval_limits(default_budget_file())
    clean = {"clips": 108, "wer_gap": 0.003, "duplicated_phrases": 0, "stray_words": 1}
    assert limits.check(clean) == []
    twice = limits.check({**clean, "duplicated_phrases": 1})
    assert twice == ["duplicated_phrases 1 > limit 0 (108 clips)"]
