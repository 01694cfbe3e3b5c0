"""The lab: the leaderboard study built on the loop at the repository root. reader.py turns run
folders and kept results into tidy tables, stats.py fits them, report.py writes the fits as
Markdown, plot.py draws the figures and holds the command line (`python lab/plot.py ...`);
sweeps/ holds the grids, figures/ what `make tables` and the figure targets write, docs/ the
leaderboard's pages. The loop never imports the lab."""
