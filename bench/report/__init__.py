"""The report of a sweep, from the store alone: the recommendation (recommend), the report's blocks (report), plots
(plots) and their markdown and HTML renderings (pages)."""
