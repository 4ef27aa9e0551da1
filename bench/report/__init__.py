"""The report of a sweep, from the store alone: the recommendation (recommend), the report's blocks (report), plots
(plots) and their markdown and HTML renderings (pages); what a run costs (cost), several sweeps side by side
(sidebyside) and the pages of a store's history (history)."""
