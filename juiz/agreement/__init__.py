"""Labels and agreement: manual labels on the judge's classes, agreement statistics, comparisons, the CI gate."""
