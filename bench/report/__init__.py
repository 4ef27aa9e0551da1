"""The report of a sweep, from the store alone: the recommendation (recommend), the report's blocks (report), plots
(plots) and their markdown and HTML renderings (pages); what a run costs (cost), several sweeps side by side
(sidebyside), the pages of a store's history (history), and the report's numbers as tables of rows (tables: what
bench.results and `./run_bench.sh export` give), and utilisation: MFU, the GPU's clocks, the utilisation plot."""
