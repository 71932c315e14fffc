"""What a compiled ncf pipeline looks like: its parameters, their types and the names in its IR.

The one home for reading a compiled template (KFP IR), which ``pipelines.pipeline`` builds to
this layout: ``load_template`` (the pipeline's name and root parameters), ``coerce_parameters``
(values converted to the declared types), ``evaluate_condition`` (a ``triggerPolicy``
condition, the CEL subset the compiler emits), which task trains, where its custom job's worker
pools are, what run parameter values cannot run on those machines, and which images it names.
``submit``, ``verify`` (the emulator), run-local and compile import it; it imports none of them.
No KFP import: reading a compiled template needs none.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from pipelines.profiles import Machine, batch_problems

DATA_URI = "data_uri"  # The pipeline parameter naming the raw ratings.

TRAIN_TASK = "train-model"  # The compiled task name of train_model (KFP derives it).
# The train task's parameter holding its custom job's worker pools (google-cloud-pipeline-
# components' custom-job wrapper input); absent when training is a plain task.
WORKER_POOL_SPECS = "worker_pool_specs"


def worker_pools(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The training custom job's worker pools as compiled ([] when training is a plain task)."""
    task = spec["root"]["dag"]["tasks"][TRAIN_TASK]
    pools = task["inputs"]["parameters"].get(WORKER_POOL_SPECS)
    return pools["runtimeValue"]["constant"] if pools else []


def compiled_replicas(spec: Mapping[str, Any]) -> int:
    """Training replicas of a compiled pipeline, read from its training task as compiled."""
    pools = worker_pools(spec)
    if not pools:
        return 1  # A plain task: one CPU machine, one replica.
    ms = pools[0]["machine_spec"]
    machine = Machine(
        ms["machine_type"],
        ms.get("accelerator_type", ""),
        int(ms.get("accelerator_count", 0)) if ms.get("accelerator_type") else 0,
        replica_count=sum(int(p.get("replica_count", 1)) for p in pools),
    )
    return machine.sync_replicas


def run_problems(spec: Mapping[str, Any], values: Mapping[str, Any]) -> list[str]:
    """What in a run's parameter values cannot run on the compiled machines.

    ``values`` override the compiled defaults; the batch sizes are checked against the training
    replicas the template was compiled for (the profile travels inside the template).
    """
    from training_core.data.prep_plan import resolve_eval_users_per_batch

    declared = spec["root"]["inputDefinitions"]["parameters"]

    def value(name: str) -> Any:
        return values[name] if name in values else declared.get(name, {}).get("defaultValue")

    train_rows, eval_rows = value("train_batch_size"), value("eval_batch_size")
    users = None
    if eval_rows:  # 0: automatic, whole users in a multiple of the replicas.
        users = resolve_eval_users_per_batch(int(eval_rows), int(value("eval_negatives")), 1, 1)
    return batch_problems(
        compiled_replicas(spec), None if train_rows is None else int(train_rows), users
    )


def images_from(spec: Mapping[str, Any], repository: str) -> list[str]:
    """Every image of ``repository`` the compiled spec names, as ``REPOSITORY:TAG``, sorted.

    Looked for anywhere in the spec: the executors' containers, the custom job's worker pools and
    any option that carries an image (a Beam worker image), so that nothing a run pulls is missed.
    """
    text = json.dumps(spec)
    return sorted(
        set(
            re.findall(
                r"(?<![A-Za-z0-9._/-])" + re.escape(repository) + r":[A-Za-z0-9_][A-Za-z0-9_.-]*",
                text,
            )
        )
    )


# Where a compiled spec names an image besides executors and worker pools: the Beam steps'
# Dataflow worker image (their component parameter), a Beam job's own option, and the image
# register_model names for serving (its parameter, set when a profile serves with its own image).
WORKER_IMAGE = "worker_image"
SERVING_IMAGE = "serving_image"
_WORKER_IMAGE_OPTION = re.compile(r"--(?:sdk_container_image|worker_harness_container_image)=(\S+)")


def _worker_images(node: Any) -> set[str]:
    """The constant values of every ``worker_image`` and ``serving_image`` task parameter."""
    found: set[str] = set()
    if isinstance(node, Mapping):
        for name in (WORKER_IMAGE, SERVING_IMAGE):
            constant = node.get(name, {})
            constant = constant.get("runtimeValue", {}) if isinstance(constant, Mapping) else {}
            if isinstance(constant, Mapping) and constant.get("constant"):
                found.add(constant["constant"])
        for value in node.values():
            found |= _worker_images(value)
    elif isinstance(node, list):
        for value in node:
            found |= _worker_images(value)
    return found


def images_named(spec: Mapping[str, Any]) -> list[str]:
    """Every container image the compiled spec runs, sorted.

    The executors' containers, the custom job's worker pools, the Dataflow workers' image
    (the Beam steps' ``worker_image``, or a ``--sdk_container_image`` option) and our own
    serving image (register_model's ``serving_image``).
    """
    executors = spec.get("deploymentSpec", {}).get("executors", {}).values()
    images = {e["container"]["image"] for e in executors if "container" in e}
    if TRAIN_TASK in spec.get("root", {}).get("dag", {}).get("tasks", {}):
        images |= {p["container_spec"]["image_uri"] for p in worker_pools(spec)}
    images |= _worker_images(spec.get("root", {})) | _worker_images(spec.get("components", {}))
    images |= set(_WORKER_IMAGE_OPTION.findall(json.dumps(spec)))
    return sorted(images)


def pin_images(text: str, digests: Mapping[str, str]) -> str:
    """A compiled template's text with each image tag of ``digests`` pinned.

    Each ``{tag: "REPO@sha256:..."}`` replaces the whole tag wherever it appears.

    Raises:
        ValueError: the template does not name one of the tags.
    """
    for tag, reference in digests.items():
        pattern = re.compile(r"(?<![A-Za-z0-9._/-])" + re.escape(tag) + r"(?![A-Za-z0-9_.:@-])")
        text, count = pattern.subn(reference, text)
        if not count:
            raise ValueError(f"the template names no image {tag}")
    return text


# --- the template and its parameters -------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Parameter:
    """A root input parameter declared in the compiled template."""

    name: str
    type: str  # STRING, NUMBER_INTEGER, NUMBER_DOUBLE, BOOLEAN, LIST or STRUCT.
    default: Any = None
    optional: bool = False


@dataclasses.dataclass(frozen=True)
class Template:
    """The parts of a compiled pipeline that submission checks against."""

    path: str
    pipeline_name: str
    parameters: Mapping[str, Parameter]
    task_count: int
    spec: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)


def load_template(path: str) -> Template:
    """Reads a compiled KFP pipeline (IR YAML or JSON) and its root parameters.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not a compiled KFP pipeline.
    """
    from pipelines import yaml_io

    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"template {path!r} not found; compile one with `ncf-pipelines compile`"
        )
    with open(path, encoding="utf-8") as f:
        try:
            doc = yaml_io.load(f)
        except yaml_io.YAMLError as e:
            raise ValueError(
                f"template {path!r} is not a compiled KFP pipeline (not valid YAML: {e})"
            ) from e
    if isinstance(doc, dict) and isinstance(doc.get("pipelineSpec"), dict):
        doc = doc["pipelineSpec"]  # A PipelineJob JSON wraps the spec.
    if not (
        isinstance(doc, dict)
        and isinstance(doc.get("pipelineInfo"), dict)
        and isinstance(doc.get("root"), dict)
        and doc["pipelineInfo"].get("name")
    ):
        raise ValueError(
            f"template {path!r} is not a compiled KFP pipeline (no pipelineInfo/root); "
            "compile one with `ncf-pipelines compile`"
        )
    return template_from_spec(doc, path)


def template_from_spec(doc: Mapping[str, Any], path: str) -> Template:
    """The root parameters and task count of a compiled pipeline spec (already parsed)."""
    declared = (doc["root"].get("inputDefinitions") or {}).get("parameters") or {}
    parameters = {
        name: Parameter(
            name=name,
            type=spec.get("parameterType", "STRING"),
            default=spec.get("defaultValue"),
            optional=bool(spec.get("isOptional")) or "defaultValue" in spec,
        )
        for name, spec in declared.items()
    }
    tasks = sum(
        len((c.get("dag") or {}).get("tasks") or {})
        for c in [doc["root"], *(doc.get("components") or {}).values()]
    )
    return Template(path, doc["pipelineInfo"]["name"], parameters, tasks, doc)


def coerce_parameters(
    template: Template, values: Mapping[str, Any], require_all: bool = True
) -> dict[str, Any]:
    """Checks names against the template and converts values to the declared types.

    Strings (as given on a command line) are parsed: integers, floats, booleans
    (true/false/yes/no/1/0) and JSON for lists and structs.

    Raises:
        ValueError: an unknown name (valid names listed), a value of the wrong type, or (with
            ``require_all``) a required parameter missing.
    """
    valid = sorted(template.parameters)
    out: dict[str, Any] = {}
    for name, value in values.items():
        param = template.parameters.get(name)
        if param is None:
            close = difflib.get_close_matches(name, valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"unknown parameter {name!r}{hint}; pipeline {template.pipeline_name!r} "
                f"takes: {', '.join(valid) or '(no parameters)'}"
            )
        out[name] = coerce_value(param, value)
    missing = [p.name for p in template.parameters.values() if not p.optional and p.name not in out]
    if missing and require_all:
        raise ValueError(
            "missing required parameter(s): "
            + ", ".join(missing)
            + " (pass --param "
            + " --param ".join(f"{m}=..." for m in missing)
            + ")"
        )
    return out


def coerce_value(param: Parameter, value: Any) -> Any:
    """``value`` converted to ``param``'s declared type (see ``coerce_parameters``).

    Raises:
        ValueError: a value of the wrong type, naming the parameter and what it expects.
    """

    def bad(expected: str) -> ValueError:
        return ValueError(f"parameter {param.name!r} expects {expected}, got {value!r}")

    t = param.type
    if t == "STRING":
        if isinstance(value, str):
            return value
        if isinstance(value, bool | int | float):
            return str(value)
        raise bad("a string")
    if t == "NUMBER_INTEGER":
        if isinstance(value, bool):
            raise bad("an integer")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise bad("an integer")
    if t == "NUMBER_DOUBLE":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        raise bad("a number")
    if t == "BOOLEAN":
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            text = value.strip().lower()
            if text in ("true", "yes", "1"):
                return True
            if text in ("false", "no", "0"):
                return False
        raise bad("true or false")
    if t in ("LIST", "STRUCT"):
        kind = list if t == "LIST" else dict
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise bad(f"a JSON {'list' if kind is list else 'object'}") from None
        if isinstance(value, kind):
            return value
        raise bad(f"a JSON {'list' if kind is list else 'object'}")
    return value  # A type this module does not know: pass it through for the service to check.


# --- conditions (triggerPolicy) ------------------------------------------------------------------


class TemplateError(ValueError):
    """A template that cannot be read or executed (the message says which part)."""


_PARAM_REF = re.compile(r"inputs\.parameter_values\[(['\"])(.+?)\1\]")
_ALLOWED = (
    ast.Expression,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.UnaryOp,
    ast.Not,
    ast.USub,
    ast.Compare,
    ast.Eq,
    ast.NotEq,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
    ast.In,
    ast.NotIn,
    ast.Constant,
    ast.Name,
    ast.Load,
    ast.Subscript,
    ast.Call,
    ast.List,
    ast.Tuple,
)
_CALLS = {"int": int, "double": float, "string": str, "bool": bool}


def condition_parameters(condition: str) -> set[str]:
    """The input parameters a ``triggerPolicy`` condition reads."""
    return {m.group(2) for m in _PARAM_REF.finditer(condition)}


def evaluate_condition(condition: str, parameters: Mapping[str, Any]) -> bool:
    """Evaluates a KFP ``triggerPolicy`` condition (the CEL subset the compiler emits).

    Raises:
        TemplateError: an expression outside that subset.
    """
    text = _PARAM_REF.sub(lambda m: f"_p[{m.group(2)!r}]", condition)
    text = text.replace("&&", " and ").replace("||", " or ")
    text = re.sub(r"!(?!=)", " not ", text)
    text = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", text))
    text = re.sub(r"\bnull\b", "None", text)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise TemplateError(f"cannot read condition {condition!r}: {e}") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise TemplateError(f"condition {condition!r} uses {type(node).__name__}")
        if isinstance(node, ast.Name) and node.id not in ("_p", *_CALLS):
            raise TemplateError(f"condition {condition!r} names {node.id!r}")
        if isinstance(node, ast.Call) and not (
            isinstance(node.func, ast.Name) and node.func.id in _CALLS
        ):
            raise TemplateError(f"condition {condition!r} calls something other than a cast")
    scope = {"_p": dict(parameters), **_CALLS, "__builtins__": {}}
    return bool(eval(compile(tree, "<condition>", "eval"), scope))  # noqa: S307 (checked above)
