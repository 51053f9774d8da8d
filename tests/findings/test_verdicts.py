"""A cell's verdicts are data its diagnosis is worded from: every committed cell round-trips, a reworded sentence
re-renders without diagnosing again, and only a whole sentence names a finding."""

import dataclasses
import json

from repro import findings, results
from repro.findings import verdicts
from repro.host.conformance import suite

CELLS = results.load(results.CONFORMANCE)["cells"]


def test_every_committed_cell_carries_verdicts_its_diagnosis_is_worded_from():
    assert all("verdicts" in c for c in CELLS)
    assert all(c["diagnosis"] == [verdicts.sentence(v) for v in c["verdicts"]] for c in CELLS)
    assert sum("id" in v for c in CELLS for v in c["verdicts"]) > 200  # most name a finding, by id


def test_a_diagnosis_names_a_finding_only_by_a_whole_sentence_then_its_detail():
    sentence = findings.shows("tensor-parallel")
    assert verdicts.of(sentence + ": 2 heads per rank") == {
        "id": "tensor-parallel", "as": "shows", "sentence": 0, "detail": ": 2 heads per rank",
    }  # fmt: skip
    assert verdicts.of(findings.refusal("opt-bias")) == {"id": "opt-bias", "as": "refused", "detail": ""}
    assert verdicts.of(sentence + "s and more") == {"text": sentence + "s and more"}  # not a whole sentence
    assert verdicts.of("correct") == {"text": "correct"}
    assert verdicts.of(findings.shows("llama-lora", 1))["sentence"] == 1


def test_a_reworded_sentence_rewords_the_cells_without_diagnosing_again(monkeypatch):
    finding = findings.by_id("zero3-qkv-bias")
    cells = [json.loads(json.dumps(c)) for c in CELLS if verdicts.shows(c, finding)][:3]
    assert cells
    reworded = dataclasses.replace(finding, shows=("The QKV bias no model has, added ({patch})",))
    monkeypatch.setitem(verdicts._BY_ID, finding.id, reworded)
    assert suite.reword(cells) == len(cells)
    assert all(c["diagnosis"][0].startswith(f"The QKV bias no model has, added ({finding.patch})") for c in cells)
    assert suite.reword(cells) == 0  # worded already


def test_a_cell_from_before_verdicts_is_read_from_its_diagnosis():
    old = {"diagnosis": [findings.shows("3453"), "correct"], "findings": [{"id": "3453", "as": "shows"}]}
    assert verdicts.named(old) == [(findings.by_id("3453"), "shows")]
    assert suite.reword([old]) == 0 and old["diagnosis"][1] == "correct"
