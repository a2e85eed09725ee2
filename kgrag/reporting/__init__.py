"""Reporting: report.md, report.html and the comparison of experiments."""
