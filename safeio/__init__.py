"""Safe inputs and outputs for every job (the simulator, the torch code, the check suite, the report): atomic
writes, output paths that never land on what we did not write, bounded reads of users' files, option value types
and names printed safely. It imports nothing of the toolkit, so every package may depend on it."""
