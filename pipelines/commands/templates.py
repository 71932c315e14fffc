"""``ncf-pipelines templates``: the pipeline templates in an Artifact Registry KFP repository.

Publishing is ``compile --publish`` (compile knows the profile, images and defaults the tags
describe); this command lists a repository and downloads a template. See docs/submit.md,
"Templates in Artifact Registry".
"""

from __future__ import annotations

import argparse
from typing import Any

from pipelines.commands._shared import UserError, example_epilog

REPO_EXAMPLE = "https://us-central1-kfp.pkg.dev/my-project/ncf"


def register(sub: argparse._SubParsersAction) -> None:
    """Adds the subcommand and its two actions."""
    p = sub.add_parser(
        "templates",
        help="list or download pipeline templates in Artifact Registry",
        description=(
            "The pipeline templates of an Artifact Registry KFP repository, "
            "https://LOCATION-kfp.pkg.dev/PROJECT/REPOSITORY: `list` shows each package's "
            "versions (sha256 of the file) with their tags, `get` downloads one. Publish with "
            "`ncf-pipelines compile --publish REPOSITORY_URL`; submit one with `ncf-pipelines "
            "submit --template REPOSITORY_URL/PACKAGE/TAG`. Credentials are Application Default "
            "Credentials."
        ),
        epilog=example_epilog(
            f"ncf-pipelines templates list --repo {REPO_EXAMPLE}",
            f"ncf-pipelines templates get {REPO_EXAMPLE}/ncf-pipeline/latest-cpu --output cpu.yaml",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="the packages, versions and tags of a repository")
    listing.add_argument(
        "--repo",
        required=True,
        metavar="REPOSITORY_URL",
        help="https://LOCATION-kfp.pkg.dev/PROJECT/REPOSITORY",
    )
    get = actions.add_parser("get", help="download one template to a file")
    get.add_argument(
        "template", metavar="TEMPLATE_URL", help="REPOSITORY_URL/PACKAGE/TAG (or .../sha256:HEX)"
    )
    get.add_argument("--output", required=True, help="YAML file to write")
    for action in (listing, get):
        action.add_argument(
            "--registry-endpoint",
            help="where Artifact Registry requests go instead of Google's hosts (a stand-in, "
            "http://127.0.0.1:PORT)",
        )
    listing.set_defaults(func=run_list)
    get.set_defaults(func=run_get)


def _credentials(endpoint: str | None) -> Any:
    """Application Default Credentials, once ``endpoint`` is known not to expose them."""
    from pipelines.submit.endpoints import REGISTRY_ENDPOINT, api_endpoint_problem
    from pipelines.submit.service import SubmitError, default_credentials

    problem = api_endpoint_problem(endpoint, REGISTRY_ENDPOINT)
    if problem:
        raise UserError(problem)
    try:
        return default_credentials()
    except SubmitError as e:
        raise UserError(str(e)) from e


def publish_template(
    path: str, repository: Any, tags: tuple[str, ...], endpoint: str | None
) -> None:
    """Uploads the compiled ``path`` (``compile --publish``) and prints its URLs."""
    from pipelines import template_registry

    try:
        published = template_registry.publish(
            path, repository, tags, credentials=_credentials(endpoint), endpoint=endpoint
        )
    except template_registry.TemplateRegistryError as e:
        raise UserError(str(e)) from e
    print(f"published {path} as {published.package} {published.version}")
    for url in published.urls():
        print(f"  {url}")


def run_list(args: argparse.Namespace) -> int:
    """Prints each package's versions, newest first, with their tags and URL."""
    from pipelines import template_registry

    repository = template_registry.parse_repository(args.repo)
    credentials = _credentials(args.registry_endpoint)
    try:
        found = template_registry.list_templates(
            repository, credentials=credentials, endpoint=args.registry_endpoint
        )
    except template_registry.TemplateRegistryError as e:
        raise UserError(str(e)) from e
    if not found:
        print(
            f"{repository.url}: no templates (publish one with `ncf-pipelines compile --publish`)"
        )
    for package, versions in found.items():
        print(f"{repository.url}/{package}")
        for v in versions:
            tags = ", ".join(v.tags) or "(untagged)"
            print(f"  {v.version}  {v.create_time}  tags: {tags}")
    return 0


def run_get(args: argparse.Namespace) -> int:
    """Downloads one template and says which version it is."""
    from pipelines import template_registry

    ref = template_registry.parse_template(args.template)
    credentials = _credentials(args.registry_endpoint)
    try:
        got = template_registry.download(
            ref, args.output, credentials=credentials, endpoint=args.registry_endpoint
        )
    except template_registry.TemplateRegistryError as e:
        raise UserError(str(e)) from e
    print(f"downloaded {ref.url} ({got.version}) to {got.path}")
    return 0
