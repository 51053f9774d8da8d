"""What a release does with a model it has no policy for is read from the script's own lines: DeepSpeed's warning
verbatim, nothing invented where it logged nothing, the wrapped and frozen counts, and a run that stopped early keeps
what it did not reach as unknown."""

from repro.host.upstream import no_policy

WARNS = """mistral: deepspeed 0.19.8, transformers 4.57.6
initialize logged: No compatible DeepSpeed inference policy found for model type MistralForCausalLM. Hybrid Engine \
inference acceleration is unavailable; rollout will use the model's native generate() path.
injected layers: 0; other layers wrapped: 0; frozen by initialize: none
Hybrid Engine vs Hugging Face: tokens [959, 305] vs [959, 305], logits max abs diff 0
OK: the Hybrid Engine stays out of the way (generate is Hugging Face's own)
"""
FREEZES = """mistral: deepspeed 0.18.3, transformers 4.57.6
initialize logged: nothing about a policy
injected layers: 0; other layers wrapped: 16; frozen by initialize: ['lm_head.weight', \
'model.layers.0.mlp.up_proj.weight']
Hybrid Engine vs Hugging Face: tokens [959, 305] vs [959, 305], logits max abs diff 0
BUG: the Hybrid Engine does not stay out of the way of a model it has no policy for
"""


def test_the_warning_is_deepspeeds_own_words_and_a_silent_release_has_none():
    found = no_policy.parse(WARNS)
    assert found["warning"].startswith("No compatible DeepSpeed inference policy found for model type Mistral")
    assert found["logged_anything"] and found["injected"] == 0 and found["wrapped"] == 0 and found["frozen"] == []
    silent = no_policy.parse(FREEZES)
    assert silent["warning"] is None and not silent["logged_anything"]
    assert silent["wrapped"] == 16 and silent["frozen"] == ["lm_head.weight", "model.layers.0.mlp.up_proj.weight"]


def test_a_run_that_stopped_before_initialize_finished_knows_nothing_it_did_not_reach():
    found = no_policy.parse("mistral: deepspeed 0.15.4, transformers 4.57.6\nTraceback ...\n")
    assert found == {"warning": None, "logged_anything": False, "injected": None, "wrapped": None, "frozen": [],
                     "generate": None}  # fmt: skip


def test_the_report_quotes_the_warning_and_counts_what_was_frozen():
    runs = [{"release": "0.19.8", "arch": "mistral", "transformers": "4.57.6", "verdict": "ok",
             **no_policy.parse(WARNS)},
            {"release": "0.18.3", "arch": "mistral", "transformers": "4.57.6", "verdict": "bug",
             **no_policy.parse(FREEZES)}]  # fmt: skip
    report = no_policy.render({"command": "python -m repro no-policy --out X", "wall_s": 12.0, "runs": runs})
    assert '| 0.19.8 | mistral (4.57.6) | "No compatible DeepSpeed inference policy found' in report
    assert "| 0.18.3 | mistral (4.57.6) | nothing | 0 | 16 | 2 |" in report and "**bug**" in report
    assert "CPU evidence" in report
