"""CPU execution: what runs the model fast on the CPU, installed on a built model by the code that runs it."""
