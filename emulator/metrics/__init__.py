"""Telemetry: every counter of a running lab, for Prometheus and the live view.

    collectors/   one module per source (fetch raw -> parse to families)
    scrape.py     all collectors in parallel, with their success and duration
    exporter.py   the families as Prometheus exposition, served over HTTP
    launch.py     the exporter process `up --metrics` starts and `down` stops
    top.py        the live view's model and rendering (`rocelab top`)
"""
