"""DuckDB analysis of run directories: the shipped queries, opening runs, writing results.

    from replay.analysis.runs import open_runs, run_query
    from replay.analysis.catalog import load_query
    con = open_runs(["runs/sample-observe"])
    table = run_query(con, load_query("conflict_rate"), {}).to_arrow_table()

The SQL lives in the top-level ``queries/`` folder (installed as ``replay.queries``) and works
from DuckDB alone; this package only opens runs, passes parameters and formats the output.
"""
