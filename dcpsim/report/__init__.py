"""Reports: plots of sweep results (plots.py) and simulated-timeline traces (trace.py)."""
