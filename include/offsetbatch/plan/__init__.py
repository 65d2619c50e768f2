"""What a run reads: the trigger's request, the scheduled plan, replays and backfills, audited resets."""
