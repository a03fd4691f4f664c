"""The report as data: findings, statuses, the troubleshooting table, serialisable to JSON.

``tfcheck.report`` names the report's classes directly (``from tfcheck.report import Report``), as it did when
it was one module; each lives in its own module here.
"""
from tfcheck.report.findings import Finding, Location
from tfcheck.report.report import SCHEMA_VERSION, Assumption, CheckResult, Cost, ModelReport, Report
from tfcheck.report.status import Status

__all__ = ["Assumption", "CheckResult", "Cost", "Finding", "Location", "ModelReport", "Report", "SCHEMA_VERSION",
           "Status"]
