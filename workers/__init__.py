"""juiz's workers: RQ jobs that grade chunks of batches with one judge engine per process."""
