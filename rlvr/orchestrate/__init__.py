"""Running the DVC pipeline from an orchestrator (the Prefect flow in flows/pipeline.py):
the DAG from DVC's index (`dag`), one stage as a subprocess with its failures classified
(`stage_process`), what a stage run reports back (`stage_report`), `-S` param overrides
through DVC's own code (`params`). Prefect itself stays in flows/."""
