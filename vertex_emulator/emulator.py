"""The one Vertex AI emulator here: what it emulates, what not, and where each rule lives.

Two sides of one service, each on the transport its clients use:

- ``RestStandIn`` (``rest_service.py``): Vertex AI's v1 REST API (pipeline jobs, schedules, models
  and their versions, endpoints with deployments and predictions, ML Metadata contexts), Cloud
  Storage's JSON listing, Resource Manager's project lookup and an OAuth ``/token``, over HTTP on
  127.0.0.1 only, every Vertex AI and Resource Manager request requiring a bearer token. The tests
  of ``submit``, ``deploy_model`` and the registry run the real client libraries against it
  (conftest.py's ``standin`` fixture). Each resource's routes are a module of their own
  (``rest_pipeline_jobs``, ``rest_models``, ``rest_endpoints``, ``rest_storage``).
- ``JobServiceStandIn`` (``job_service.py``): Vertex AI's JobService over gRPC, on a Unix socket
  in a new folder of mode 0700, never a TCP port (it runs the commands a job names). It creates,
  gets and cancels custom jobs and hyperparameter tuning jobs and RUNS them: one local process
  per replica with the ``CLUSTER_SPEC`` and ``AIP_*`` variables Vertex AI sets, a tuning job's
  trials one after another (``replicas`` runs a job's replicas, ``tuning`` a tuning job's
  trials). ``ncf-pipelines verify`` starts it for the launcher of every custom-job task.

Beside it, one stand-in of another service: ``RegistryStandIn`` (``registry_service.py``), an
Artifact Registry Kubeflow Pipelines repository (template upload, versions, tags, downloads) for
kfp's own ``RegistryClient`` (``pipelines/template_registry.py``); its docstring lists what it does
not emulate.

Each of the service's rules has one home, which both sides and ``submit`` use:

- names (parent, network, service account, context and experiment ids, labels as ``submit``
  checks them): ``pipelines.vertex_names``;
- what CreateCustomJob refuses that the proto accepts: ``pipelines.run_plan.custom_job``
  (``service_problems``; ``submit``'s preflight and verify's offline checks call it too), and
  what CreateHyperparameterTuningJob refuses beyond that: ``tuning_jobs.tuning_problems``;
- authentication (401 UNAUTHENTICATED without the token): ``rest_service``;
- the REST messages' documented limits (display names, job, model and context ids, labels of the
  v1 reference, required fields, pipeline parameters against the compiled spec): ``rest_checks``;
  traffic splits: ``rest_endpoints``.

Emulated: each request is the real client's (parsed strictly as its v1 message: an unknown field
or a wrong type is refused), answered with the service's status and words; resources kept in
memory; long-running operations that the client's first poll finds done; custom-job replicas as
real processes (multi-worker training over loopback), a failed replica failing the job with its
last lines of output; trial metrics read from the file ``cloudml-hypertune`` writes.

Not emulated:

- running a pipeline job (it stays ``PIPELINE_STATE_RUNNING``; ``verify`` runs the compiled tasks
  itself) or a schedule's runs; deleting or cancelling REST resources;
- Vertex AI list filters beyond ``display_name``/``labels.KEY`` terms joined by AND/OR, orders
  other than ``update_time desc``, and paging of Vertex AI lists (Cloud Storage listings page);
- object contents over HTTP (tests seed the listing with ``put_object``; ``verify`` maps
  ``gs://`` to local files instead), and the serving containers (a test's ``predictor`` answers
  ``:predict`` and ``:rawPredict``);
- identity and access: tokens are not verified beyond being the one ``/token`` issued or shaped
  as a JWT (the signature is not checked), no IAM, quotas or organization policies; the gRPC side
  takes no credentials at all (its guard is the socket's private folder);
- the container images (not pulled: this Python environment runs every replica), accelerators
  (a pool whose GPU or TPU this machine lacks trains on the CPU, and the report says so), one host
  per replica (all share this one), ``python_package_spec`` pools;
- Vertex AI Vizier: trials are drawn at random from the study spec with a fixed seed, run one at
  a time, without early stopping;
- the service's full validation: machine and accelerator combinations per region, reservations,
  persistent resources, and the labels the service adds itself.
"""

from __future__ import annotations

from vertex_emulator.job_service import JobServiceStandIn
from vertex_emulator.rest_service import RestStandIn

__all__ = ["JobServiceStandIn", "RestStandIn"]
