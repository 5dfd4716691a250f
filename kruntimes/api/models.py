"""The kruntimes.io/v1alpha1 API as pydantic models: the single source for Run and Runtime.

Everything else derives from these classes: the CRDs in ``deploy/`` are generated from
their JSON schema (hence a ``description`` on every field), the scheduler's PreFilter and
runtimed validate with them, and replay reads the same shapes back from the journal.

Every list, map and string a user writes is bounded (Kubernetes' name lengths and the
caps of `scheduler.validation`, listed in docs/api-bounds.md), so no single Run makes an
unbounded journal record or planner cycle; one over a bound fails PreFilter, saying so.

Field names are snake_case in Python and camelCase on the wire (``alias_generator``);
dump with ``model_dump(by_alias=True, exclude_none=True)`` when writing to the API.
Spec models reject unknown fields so a typo (``runtme``) fails loudly instead of being
ignored; metadata and status models ignore them, because the API server adds fields
over time and kruntimes never owns all of them.
"""

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, field_validator, model_validator

from kruntimes import wire
from kruntimes.api import device_models
from kruntimes.api import quantity
from kruntimes.api.fields import (  # noqa: F401 - constants and types re-exported for callers
    API_VERSION, CAPACITY_ANNOTATION, CAPACITY_ANNOTATION_PREFIX, GROUP, HEARTBEAT_ANNOTATION,
    KEYS_ARE_QUALIFIED_NAMES, MAX_ARG_CHARS, MAX_ARGS, PRESERVE_UNKNOWN, RUNS_RESOURCE, RUNTIME_LABEL,
    RUNTIME_POD_TOPOLOGY, VERSION, Arg, Count, LabelKey, LabelValue, MapLabelKey, NullAsEmpty, ResourceName,
    RuntimeName, Weight, WorkspaceName, check_runtime_name, check_topology_key, invalid,
)
from kruntimes.api.fields import Object as _Object
from kruntimes.api.fields import Spec as _Spec
from kruntimes.scheduler import validation as bounds


class ObjectMeta(_Object):
    """The subset of Kubernetes object metadata kruntimes reads."""

    name: str = Field(description="Object name, unique within its namespace.")
    namespace: str = Field(default="default", description="Namespace of the object.")
    uid: str | None = Field(default=None, description="Server-assigned unique id.")
    resource_version: str | None = Field(
        default=None, description="Opaque version for optimistic concurrency."
    )
    generation: int | None = Field(default=None, description="Spec generation.")
    labels: Annotated[dict[str, str], NullAsEmpty] = Field(
        default_factory=dict, description="Object labels."
    )
    annotations: Annotated[dict[str, str], NullAsEmpty] = Field(
        default_factory=dict, description="Object annotations."
    )
    creation_timestamp: datetime | None = Field(default=None, description="Creation time.")
    deletion_timestamp: datetime | None = Field(
        default=None, description="Set once deletion was requested."
    )


class LabelSelectorRequirement(_Spec):
    """One ``matchExpressions`` entry, with Kubernetes semantics."""

    key: LabelKey = Field(description="Label key the requirement applies to.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="In, NotIn, Exists or DoesNotExist."
    )
    values: list[LabelValue] = Field(
        default_factory=list,
        max_length=bounds.MAX_VALUES,
        description="Values for In and NotIn (at least one); empty for Exists and DoesNotExist. "
        f"At most {bounds.MAX_VALUES}.",
    )

    @model_validator(mode="after")
    def _values_fit_operator(self) -> "LabelSelectorRequirement":
        if self.operator in ("In", "NotIn") and not self.values:
            raise invalid(
                "selector_values_required",
                f'operator "{self.operator}" needs at least one entry in values',
            )
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise invalid(
                "selector_values_forbidden",
                f'operator "{self.operator}" takes no values; remove values or use "In"',
            )
        return self


class LabelSelector(_Spec):
    """Selects Runs by label; ``{}`` selects every Run (Kubernetes semantics)."""

    match_labels: dict[MapLabelKey, LabelValue] | None = Field(
        default=None,
        max_length=bounds.MAX_MATCH_LABELS,
        description="Labels a Run must carry with exactly these values. "
        f"At most {bounds.MAX_MATCH_LABELS}.",
        json_schema_extra=KEYS_ARE_QUALIFIED_NAMES,
    )
    match_expressions: list[LabelSelectorRequirement] | None = Field(
        default=None,
        max_length=bounds.MAX_EXPRESSIONS,
        description="Requirements a Run's labels must all satisfy. "
        f"At most {bounds.MAX_EXPRESSIONS}.",
    )


class RunAffinityTerm(_Spec):
    """Runs matched by ``labelSelector`` on the same Runtime Pod."""

    label_selector: LabelSelector | None = Field(
        default=None,
        description="Runs this term matches; missing matches nothing, {} matches every Run.",
    )
    topology_key: Annotated[str, AfterValidator(check_topology_key)] = Field(
        description=f'Co-location domain; only "{RUNTIME_POD_TOPOLOGY}" is supported.',
        json_schema_extra={"enum": [RUNTIME_POD_TOPOLOGY]},
    )


class WeightedRunAffinityTerm(_Spec):
    """A preferred term and how much it counts in scoring."""

    weight: Weight = Field(description="Score weight, 1 to 100.")
    term: RunAffinityTerm = Field(description="The preferred term.")


class RunAffinityRules(_Spec):
    """Hard (``required``) and soft (``preferred``) terms of one direction."""

    required: list[RunAffinityTerm] = Field(
        default_factory=list,
        max_length=bounds.MAX_TERMS,
        description=f"Terms every candidate pod must satisfy. At most {bounds.MAX_TERMS}.",
    )
    preferred: list[WeightedRunAffinityTerm] = Field(
        default_factory=list,
        max_length=bounds.MAX_TERMS,
        description=f"Terms that raise or lower a pod's score. At most {bounds.MAX_TERMS}.",
    )


class RunAffinitySpec(_Spec):
    """Run-to-Run affinity and anti-affinity (SPEC §2.2, §3.3, §3.4)."""

    run_affinity: RunAffinityRules | None = Field(
        default=None, description="Place near Runs matched by these terms."
    )
    run_anti_affinity: RunAffinityRules | None = Field(
        default=None, description="Keep away from Runs matched by these terms."
    )


class ResourceRequirements(_Spec):
    """Logical Runtime resources a Run needs on its pod; ``runs`` defaults to 1."""

    requests: Annotated[dict[ResourceName, Count], NullAsEmpty] = Field(
        default_factory=lambda: {RUNS_RESOURCE: 1},
        max_length=bounds.MAX_RESOURCES,
        description="Resource name to non-negative whole quantity; runs defaults to 1. "
        f"At most {bounds.MAX_RESOURCES} resources.",
        json_schema_extra=KEYS_ARE_QUALIFIED_NAMES,
    )

    @model_validator(mode="before")
    @classmethod
    def _reject_limits(cls, data: Any) -> Any:
        # Checked before field validation so the message says why, not just "extra field".
        if isinstance(data, dict) and "limits" in data:
            raise invalid(
                "limits_unsupported",
                "limits are not supported: Runs only have requests; remove spec.resources.limits",
            )
        return data

    @field_validator("requests")
    @classmethod
    def _default_runs_then_drop_zeros(cls, requests: dict[str, int]) -> dict[str, int]:
        # Default first, drop zeros after: an explicit `runs: "0"` therefore means "no
        # runs request" (the Run takes no run slot), while an omitted `runs` means 1.
        # Sorted so every consumer iterates resources in the same order (SPEC §3.4).
        with_default = {RUNS_RESOURCE: 1, **requests}
        return {name: count for name, count in sorted(with_default.items()) if count > 0}


class TaskMode(_Spec):
    """Run to completion: execute ``args`` as a process."""

    args: list[Arg] = Field(
        min_length=1,
        max_length=MAX_ARGS,
        description=f"Command and arguments to execute: at most {MAX_ARGS}, "
        f"each at most {MAX_ARG_CHARS} characters.",
    )


class FunctionMode(_Object):
    """Long-lived: active until released. Its settings belong to the Runtime Server."""

    model_config = ConfigDict(extra="allow", json_schema_extra=PRESERVE_UNKNOWN)


class RunMode(_Spec):
    """How the Run executes: exactly one of ``task`` or ``function``."""

    task: TaskMode | None = Field(default=None, description="Run to completion.")
    function: FunctionMode | None = Field(
        default=None, description="Long-lived; active until released."
    )

    @model_validator(mode="before")
    @classmethod
    def _known_modes_only(cls, data: Any) -> Any:
        # Phrased as the one rule a user must follow rather than "extra field".
        if isinstance(data, dict):
            unknown = sorted(str(key) for key in data if key not in ("task", "function"))
            if unknown:
                shown = quantity.describe_input(unknown[0])
                raise invalid(
                    "unknown_mode",
                    f'spec.mode must set exactly one of "task" or "function" (got {shown})',
                )
        return data

    @model_validator(mode="after")
    def _exactly_one(self) -> "RunMode":
        if (self.task is None) == (self.function is None):
            raise invalid(
                "mode_not_exactly_one", 'spec.mode must set exactly one of "task" or "function"'
            )
        return self


class RunSpec(_Spec):
    """What a Run asks for (SPEC §2.2)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "has(self.resources) == has(oldSelf.resources)", "message": "spec.resources is immutable"},
                {"rule": "has(self.devices) == has(oldSelf.devices)", "message": "spec.devices is immutable"},
            ]
        }
    )

    runtime: RuntimeName = Field(
        description="Name of a Runtime in the Run's namespace (a DNS subdomain of at most "
        f"{bounds.MAX_RUNTIME_NAME} characters, as it is also its pods' label value)."
    )
    resources: Annotated[ResourceRequirements, NullAsEmpty] = Field(
        default_factory=ResourceRequirements,
        description="Logical resource requests; immutable after creation.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self == oldSelf", "message": "spec.resources is immutable"}
            ]
        },
    )
    mode: RunMode | None = Field(default=None, description="task or function.")
    affinity: RunAffinitySpec | None = Field(
        default=None, description="Run-to-Run affinity and anti-affinity."
    )
    workspace: WorkspaceName | None = Field(
        default=None,
        description="Workspace name; its Runs share one Runtime Pod. A DNS subdomain of at "
        f"most {bounds.MAX_WORKSPACE_NAME} characters.",
    )
    devices: device_models.DeviceClaimSpec | None = Field(
        default=None, description="Devices of the Runtime Pod the Run needs (SPEC §7.3); immutable after creation.",
        json_schema_extra={"x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "spec.devices is immutable"}]})


class Condition(_Object):
    """A Kubernetes-style status condition."""

    type: str = Field(description="Condition type, e.g. Scheduled.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(default="", description="Machine-readable CamelCase reason.")
    message: str = Field(default="", description="Human-readable, bounded explanation.")
    last_transition_time: datetime | None = Field(
        default=None, description="When status last changed."
    )
    observed_generation: int | None = Field(
        default=None, description="Spec generation the condition was computed from."
    )


class Assignment(_Object):
    """The Runtime Pod a Run was bound to."""

    pod_name: str = Field(description="Name of the Runtime Pod.")
    # Explicit alias: to_camel would say podUid, Kubernetes spells it podUID.
    pod_uid: str | None = Field(
        default=None, alias="podUID", description="UID of that pod; a recreated pod differs."
    )
    # SPEC §3.6 fence: the server refuses an assignment set in any other term
    # (deploy/base/scheduler-fence-policy.yaml); older schedulers wrote none.
    term: int | None = Field(
        default=None, ge=0, le=2**31 - 1,
        description="Leadership term of the scheduler that wrote it: the scheduler Lease's "
                    "spec.leaseTransitions when it took the lease. Absent from older schedulers.",
    )


RunPhase = wire.Phase


class RunStatus(_Object):
    """Observed state of a Run, written by the scheduler and runtimed."""

    phase: RunPhase | None = Field(default=None, description="Lifecycle phase.")
    assignment: Assignment | None = Field(default=None, description="Chosen Runtime Pod.")
    conditions: list[Condition] = Field(default_factory=list, description="Conditions.")
    completion_time: datetime | None = Field(
        default=None, description="When the Run became terminal."
    )
    released: bool = Field(
        default=False, description="A function Run was released and is no longer active."
    )
    devices: dict[str, Any] | None = Field(default=None, json_schema_extra=PRESERVE_UNKNOWN, description="Devices "
                                           "allocated with the assignment: {inventoryDigest, results} (SPEC §7.6).")


class Run(_Object):
    """One unit of work on a Runtime."""

    api_version: Literal["kruntimes.io/v1alpha1"] = Field(
        default=API_VERSION, description="Always kruntimes.io/v1alpha1."
    )
    kind: Literal["Run"] = Field(default="Run", description="Always Run.")
    metadata: ObjectMeta = Field(description="Standard object metadata.")
    spec: RunSpec = Field(description="What the Run asks for.")
    status: RunStatus | None = Field(default=None, description="Observed state.")


class RuntimeCapacity(_Spec):
    """Logical capacity of EACH Runtime Pod; projected onto pod annotations."""

    resources: Annotated[dict[ResourceName, Count], NullAsEmpty] = Field(
        default_factory=dict,
        max_length=bounds.MAX_RESOURCES,
        description="Resource name to whole quantity; 0 is kept (it admits nothing). "
        f"At most {bounds.MAX_RESOURCES} resources.",
        json_schema_extra=KEYS_ARE_QUALIFIED_NAMES,
    )

    @field_validator("resources")
    @classmethod
    def _sorted(cls, resources: dict[str, int]) -> dict[str, int]:
        # No runs default here: a pod without it gets the scheduler's default (§2.3).
        return dict(sorted(resources.items()))


class RuntimeSpec(_Spec):
    """A pool of Runtime Pods."""

    replicas: int = Field(default=1, ge=0, description="Number of Runtime Pods.")
    template: dict[str, Any] = Field(
        description="Pod template (metadata and spec) for the Runtime Pods.",
        json_schema_extra=PRESERVE_UNKNOWN,
    )
    capacity: RuntimeCapacity = Field(
        default_factory=RuntimeCapacity, description="Logical capacity of each pod."
    )
    devices: Annotated[dict[str, Any], AfterValidator(device_models.check_runtime_devices)] | None = Field(
        default=None, description=device_models.RUNTIME_DEVICES_DESCRIPTION, json_schema_extra=device_models.RUNTIME_DEVICES_SCHEMA)


class RuntimeStatus(_Object):
    """Observed state of a Runtime's pods."""

    replicas: int = Field(default=0, description="Runtime Pods that exist.")
    ready_replicas: int = Field(default=0, description="Runtime Pods that are Ready.")
    # Without it in the schema the API server prunes what the controller writes (SPEC §4.2).
    observed_generation: int | None = Field(
        default=None, ge=0, description="The spec generation this status was computed from."
    )
    conditions: list[Condition] = Field(default_factory=list, description="Conditions.")


class Runtime(_Object):
    """A pool declaration: pod template, replica count and per-pod capacity."""

    # Its name is its pods' kruntimes.io/runtime label value: at most 63 characters.
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [{
        "rule": f"size(self.metadata.name) <= {bounds.MAX_RUNTIME_NAME}",
        "message": f"a Runtime name is at most {bounds.MAX_RUNTIME_NAME} characters: "
        "it is also its pods' kruntimes.io/runtime label value"}]})

    api_version: Literal["kruntimes.io/v1alpha1"] = Field(
        default=API_VERSION, description="Always kruntimes.io/v1alpha1."
    )
    kind: Literal["Runtime"] = Field(default="Runtime", description="Always Runtime.")
    metadata: ObjectMeta = Field(description="Standard object metadata.")
    spec: RuntimeSpec = Field(description="The pool.")
    status: RuntimeStatus | None = Field(default=None, description="Observed state.")

    @field_validator("metadata")
    @classmethod
    def _name_fits_the_runtime_label(cls, metadata: ObjectMeta) -> ObjectMeta:
        check_runtime_name(metadata.name)
        return metadata
