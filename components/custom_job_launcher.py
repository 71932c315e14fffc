"""The training custom job's launcher: google-cloud-pipeline-components' own, retried correctly.

GCPC's launcher (``google_cloud_pipeline_components.container.v1.custom_job.launcher``) first
reads its ``gcp_resources`` output: when the file names a job, it polls that job instead of
creating one. That is right after the launcher's own pod restarts while the job runs, but wrong
for a task retry: the retried task finds the failed job there, polls it, and fails again at once
without training again. This launcher does exactly what GCPC's does, after one check: when
``gcp_resources`` names a job that ended without success (failed, cancelled, expired), the
record is cleared (the old job is logged) so GCPC creates a new job. That job runs the same
command on the same output artifacts, so training resumes from the checkpoints in the model
folder. A job that is still running, or succeeded, is polled as before.

The compiled pipeline runs it as ``python3 -u -m components.custom_job_launcher`` with GCPC's
arguments, in the ncf-pipelines CPU image (which has GCPC installed).
"""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger(__name__)

MODULE = "components.custom_job_launcher"


def _ended_without_success(state) -> bool:
    from google.cloud.aiplatform_v1.types import job_state

    s = job_state.JobState
    return state in (s.JOB_STATE_FAILED, s.JOB_STATE_CANCELLED, s.JOB_STATE_EXPIRED)


def clear_failed_job(job_type: str, project: str, location: str, gcp_resources: str) -> str | None:
    """Clears ``gcp_resources`` when the job it names ended without success; returns that job."""
    from google_cloud_pipeline_components.container.v1.custom_job import remote_runner
    from google_cloud_pipeline_components.container.v1.gcp_launcher import job_remote_runner

    runner = job_remote_runner.JobRemoteRunner(job_type, project, location, gcp_resources)
    job_name = runner.check_if_job_exists()
    if job_name is None:
        return None
    job = remote_runner.get_custom_job_with_client(runner.job_client, job_name)
    if not _ended_without_success(job.state):
        return None
    log.warning(
        "%s ended as %s (%s); this is a retry: creating a new job, which resumes from the "
        "model folder's checkpoints",
        job_name,
        job.state.name,
        job.error.message or "no error message",
    )
    os.remove(gcp_resources)
    return job_name


def main(argv: list[str]) -> None:
    """Same arguments as GCPC's custom-job launcher."""
    from google_cloud_pipeline_components.container.v1.custom_job import launcher
    from google_cloud_pipeline_components.container.v1.gcp_launcher.utils import parser_util

    logging.basicConfig(level=logging.INFO)
    _, args = parser_util.parse_default_args(argv)
    clear_failed_job(args.type, args.project, args.location, args.gcp_resources)
    launcher.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
