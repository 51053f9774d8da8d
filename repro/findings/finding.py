"""What one finding is, as data: the shape every record of the registry (repro.findings.registry) has.

Everything that names a finding (the builds, the diagnoses, the regression tests, the issue scripts, the
user's "am I affected?" table) reads these records, so a finding's facts are typed once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# What DeepSpeed as released does where a finding shows, in the words the user-facing table uses.
SILENTLY_WRONG = "silently wrong"
CRASH = "crashes"
SILENTLY_OFF = "Hybrid Engine off"  # DeepSpeed >= 0.19.7 warns; repro.host.upstream.no_policy
OUTCOMES = (SILENTLY_WRONG, CRASH, SILENTLY_OFF)
# How the series answers: the configuration computes correctly, or DeepSpeed refuses it by name.
FIXED = "correct"
REFUSED = "refused by name"
# What a compiled kernel does where the code says it differs from the CPU measurement but nobody has run it.
NOT_ESTABLISHED = "not established"


@dataclass(frozen=True)
class Arch:
    """An architecture the suite runs (repro/rank/archs/ holds its adapter, by `name`)."""

    name: str  # the suite's name for it
    title: str  # as its authors write it
    model_type: str  # Transformers' config.model_type


@dataclass(frozen=True)
class KernelPath:
    """What DeepSpeed's compiled `transformer_inference` kernels (CUDA, ROCm) do where a finding's CPU evidence
    comes from DeepSpeed's PyTorch path: read from the kernel's code, not run. `outcome` None: the finding does not
    show there."""

    outcome: str | None
    read: str  # where in the code, and what it does


@dataclass(frozen=True)
class Script:
    """A standalone issue script (repro/issue_scripts/) that shows the finding: how it runs."""

    file: str
    ranks: int = 1
    args: tuple[str, ...] = ()
    transformers: str | None = None  # the Transformers it runs on here, when not the pinned one


@dataclass(frozen=True)
class Scope:
    """Where the finding shows, on axes a user can name (repro.findings.setup.Setup). None: either way."""

    archs: tuple[str, ...]
    zero: tuple[int, ...] = (2, 3)
    lora: bool | None = None  # True: only with LoRA on the attention or MLP
    tp: bool | None = None  # True: only with hybrid_engine.inference_tp_size > 1; False: only without
    mpu: bool | None = None  # True: only with an mpu handed to deepspeed.initialize (DeepSpeed-Chat hands none)
    pin: bool | None = None  # False: only with hybrid_engine.pin_parameters false
    left_pad: bool | None = None  # True: only with left-padded prompts
    min_ranks: int = 1  # the fewest ranks it shows with
    data_parallel: bool | None = None  # True: only with more ranks than inference_tp_size (data-parallel rank > 0)
    # False: only where inference_tp_size does not divide the ranks (a rank is outside every tensor-parallel group)
    tp_divides_ranks: bool | None = None
    transformers: tuple[str | None, str | None] = (None, None)  # first and last Transformers it shows on
    # A model setting the standard checkpoints of these architectures do not have, in words (None: the standard
    # ones hit), and the test of a Hugging Face config for it (fields it lacks take Transformers' defaults).
    config: str | None = None
    when: Callable[[dict], bool] | None = None
    # True: only where the caller runs `engine.generate()` (DeepSpeed-Chat calls `model.module.generate()`, which
    # the Hybrid Engine replaces only where it built containers).
    engine_generate: bool | None = None
    # True: only where one process builds a second Hybrid Engine model after a first (DeepSpeed-Chat builds one, its
    # actor's).
    second_engine: bool | None = None
    # A call order other than DeepSpeed-Chat's (eval, generate, train each step); None: that order hits.
    order: str | None = None
    # What DeepSpeed as released does where this scope covers, where it differs from its finding's `outcome` (one
    # finding, several causes: a measured outcome per cause).
    outcome: str | None = None
    # The config's own numbers that meet `config`, for the user's answer ("8 of 32 heads are key/value heads").
    explain: Callable[[dict], str] | None = None
    # Where this cause's CPU evidence comes from DeepSpeed's PyTorch path and the compiled kernels differ by the code.
    kernel: KernelPath | None = None


@dataclass(frozen=True)
class Alone:
    """Conformance cells that show a finding alone: the whole series less its patch, where as released another bug
    hides it. A scenario's cells run the default configuration under ZeRO-3 (on 1 and 2 ranks where the scenario is
    pinned, else 2); a configuration's run the reference scenario under ZeRO-2 on 1 rank and ZeRO-3 on 2."""

    archs: tuple[str, ...]
    scenarios: tuple[str, ...] = ("reference",)
    configuration: str = "default"
    transformers: str | None = None  # the Transformers to run on, where not the architecture's default

    def __post_init__(self) -> None:
        if (self.configuration != "default" or self.transformers) and self.scenarios != ("reference",):
            raise ValueError("a configuration's or another Transformers' cells run the reference scenario only")


INJECTION = "injection"  # a bug on the containers' layer: kernel injection and the Hybrid Engine alike
HYBRID_ENGINE_ONLY = "hybrid-engine"  # a bug of the Hybrid Engine's own path (its ZeRO-3 merge, LoRA, LayerNorms)


@dataclass(frozen=True)
class IssueTable:
    """What a finding's conformance issue text tabulates (repro.host.conformance.issue_texts renders it): the cells
    it shows, in the suite's names (a cell's arch, scenario, configuration, zero_stage, lora, order, world_size,
    transformers); the columns of what each measured (issue_texts.COLUMNS); the DeepSpeed paths the bug is on; and
    the sentence of `shows` its cells' diagnoses carry."""

    cells: Callable[[dict], bool]
    columns: tuple[str, ...]
    paths: str  # INJECTION or HYBRID_ENGINE_ONLY
    sentence: int = 0
    off_pin: bool = False  # only the cells on another Transformers than the pinned one (constraints/pinned.txt)
    gpt_neox: bool = False  # its text says GPT-NeoX's hidden-size prerequisite (the released cells ran a shim)
    fixed: str | None = None  # how its fixed cells are summed up, where not by correctness (issue_texts.FIXED)

    def __post_init__(self) -> None:
        if self.paths not in (INJECTION, HYBRID_ENGINE_ONLY) or not self.columns:
            raise ValueError(f"an issue table needs columns and paths {INJECTION!r} or {HYBRID_ENGINE_ONLY!r}")


@dataclass(frozen=True)
class Crash:
    """A crash that names a finding in a conformance cell: the exception's type, the place that raised it (a path
    prefix, as repro.rank records it: `deepspeed/...`, `transformers/...`), its message (how it begins, or `how` else)
    and what of the cell it needs. Positive evidence: DeepSpeed failed on what the bug leaves it, where it reads it."""

    at: str
    message: str
    type: str | None = None  # None: any exception
    how: str = "starts"  # how `message` meets the crash's: starts, ends, equals or holds
    arch: str | None = None  # only for this architecture (tried before a crash of any)
    tensor_parallel: bool = False  # only under inference_tp_size > 1
    sentence: int = 0  # the sentence of the finding's `shows` it names
    refused: bool = False  # it names the finding's refusal instead
    rank: bool = False  # the sentence goes on with the crashing rank and the message

    def __post_init__(self) -> None:
        if self.how not in ("starts", "ends", "equals", "holds"):
            raise ValueError(f"crash at {self.at}: how {self.how!r} is not starts, ends, equals or holds")

    def meets(self, cell: dict, crash: dict) -> bool:
        """Whether a cell's crash ({type, message, at}) is this one."""
        message = crash["message"]
        said = {"starts": message.startswith, "ends": message.endswith, "equals": message.__eq__,
                "holds": message.__contains__}[self.how](self.message)  # fmt: skip
        tp = (cell.get("tensor_parallel") or {}).get("mp_size", 1) > 1
        return (
            said
            and crash["at"].startswith(self.at)
            and self.type in (None, crash["type"])
            and self.arch in (None, cell.get("arch"))
            and (tp or not self.tensor_parallel)
        )


@dataclass(frozen=True)
class Finding:
    """One Hybrid Engine bug: its patch, where it shows, what a user can do, and how it is proven."""

    id: str  # stable, kebab-case; the issue text's name where there is one
    patch: str  # repro/patches/<patch>-*.patch
    summary: str  # the bug in one sentence, for users
    outcome: str  # what DeepSpeed 0.19.8 as released does where it shows: one of OUTCOMES
    scope: Scope
    workaround: str  # what a user can change today without patching DeepSpeed, or "none"
    tests: tuple[str, ...]  # its upstream tests, under tests/upstream/
    fix: str = FIXED  # what the series does: FIXED, or REFUSED where the kernel cannot compute the setting
    # Where a fix serves some settings and refuses the rest: the config test of those it refuses, and where what it
    # refuses depends on the tensor-parallel size too, the test of (config, inference_tp_size).
    refused_when: Callable[[dict], bool] | None = None
    refused_with_tp: Callable[[dict, int], bool] | None = None
    upstream: tuple[str, ...] = ()  # DeepSpeed issues and pull requests it answers
    needs: tuple[str, ...] = ()  # findings whose patches its tests need beside it (ids)
    bug_errors: tuple[str, ...] = ()  # where the bug is an exception: its type, the test's failure
    # The Transformers its tests are proven on where its end-to-end test needs its model injected and the pinned one
    # does not inject it (OPT: < 4.49); None: the pinned one. Elsewhere that test skips, by name.
    tests_on: str | None = None
    text: str | None = None  # its issue text's file name (results/reference/conformance/ or family/)
    scripts: tuple[Script, ...] = ()
    # The conformance diagnosis' words for it ({patch} is filled in): what a cell shows, and the series' refusal.
    shows: tuple[str, ...] = ()
    refusal: str | None = None
    # Where the script needs no kernel, or shows the bug before any: why (the issue text's CPU paragraph).
    kernels_needed: str | None = None
    kernel_free: str | None = None
    also: tuple[Scope, ...] = ()  # further scopes where it shows (a union: where any holds)
    # Where the CPU evidence comes from DeepSpeed's PyTorch path and the compiled kernels differ by the code.
    kernel: KernelPath | None = None
    # True: it shows in deepspeed.initialize, before any other finding can (it decides alone, as a crashing limit).
    at_initialize: bool = False
    alone: tuple[Alone, ...] = ()  # the conformance cells that show it alone (the suite's leave-one-out cells)
    # How a conformance cell names it (repro.host.conformance.diagnosis reads these): the native twin
    # (repro.rank.archs) whose output the Hybrid Engine reproduces, one per sentence of `shows` ("": none), and the
    # container file whose refusal is this finding's with the setting its message names.
    twins: tuple[str, ...] = ()
    refused_by: tuple[str, str] | None = None
    crashes: tuple[Crash, ...] = ()  # the crashes that name it (their sentence: `shows`, or its refusal)
    table: IssueTable | None = None  # its conformance issue text's table (where the suite's cells show it)
    # Where no conformance cell shows it (its issue text rests on its script): why, where not the default reason
    # (one Hybrid Engine model per cell's process: repro.host.conformance.issue_brief.NO_CELL).
    no_cell: str | None = None

    def __post_init__(self) -> None:
        if any((scope.config is None) != (scope.when is None) for scope in self.scopes):
            raise ValueError(f"finding {self.id}: a scope's config needs both its words and its test")
        for outcome in (self.outcome, *(scope.outcome for scope in self.scopes if scope.outcome)):
            if outcome not in OUTCOMES:
                raise ValueError(f"finding {self.id}: outcome {outcome!r} is not one of {OUTCOMES}")
        if (self.refused_when or self.refused_with_tp) is not None and self.fix != FIXED:
            raise ValueError(f"finding {self.id}: refused_when is for a fix that serves some settings (fix={FIXED!r})")
        if self.fix not in (FIXED, REFUSED):
            raise ValueError(f"finding {self.id}: fix {self.fix!r} is not {FIXED!r} or {REFUSED!r}")
        if self.table is not None and self.table.sentence >= len(self.shows):
            raise ValueError(f"finding {self.id}: its issue table names a sentence it does not have")
        for crash in self.crashes:
            if (crash.refused and self.refusal is None) or (not crash.refused and crash.sentence >= len(self.shows)):
                raise ValueError(f"finding {self.id}: a crash at {crash.at} names a sentence it does not have")

    def says(self, template: str) -> str:
        """A diagnosis or refusal sentence with this finding's patch number filled in."""
        return template.format(patch=self.patch)

    def refuses(self, config: dict | None, tp: int = 1) -> bool:
        """Whether the series refuses a model with this config by name at inference_tp_size `tp` (None: a config not
        known here)."""
        if self.fix == REFUSED:
            return True
        if config is None:
            return False
        by_tp = self.refused_with_tp is not None and self.refused_with_tp(config, tp)
        return by_tp or (self.refused_when is not None and self.refused_when(config))

    @property
    def scopes(self) -> tuple[Scope, ...]:
        return (self.scope, *self.also)

    def names(self, crash: Crash) -> str:
        """The diagnosis sentence a crash of this finding names."""
        return self.says(self.refusal if crash.refused else self.shows[crash.sentence])

    @property
    def diagnoses(self) -> tuple[str, ...]:
        """Every sentence the conformance diagnosis names this finding with."""
        found = tuple(self.says(t) for t in self.shows)
        return found + ((self.says(self.refusal),) if self.refusal else ())


@dataclass(frozen=True)
class Limit:
    """What DeepSpeed does that the series leaves as it is: by design, where the Hybrid Engine declines a model (it
    runs natively, refuses by name, or has no container for it); or `pending`, a failure the Transformers sweep
    measured on releases the series has no patch for yet. A user's answer names it beside the findings. A limit that
    crashes in `deepspeed.initialize` (registry.INITIALIZE_STEP) decides alone; one that crashes later decides as a
    finding's crash would."""

    id: str
    summary: str
    outcome: str  # one of OUTCOMES: what a user sees
    scope: Scope
    workaround: str
    series: str = REFUSED  # what the series leaves there: REFUSED (DeepSpeed's own refusal), SILENTLY_OFF, CRASH
    measured: str = ""  # the cell or run that measured it, for the answer's evidence line
    pending: str = ""  # a bug, not a design: why the series has no patch for it yet ("": DeepSpeed's design)

    @property
    def scopes(self) -> tuple[Scope, ...]:
        """As a finding's: a limit has one scope."""
        return (self.scope,)
