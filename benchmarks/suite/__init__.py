"""The parts of the benchmark suite that ``python -m benchmarks.run`` puts together.

- :mod:`benchmarks.suite.columns`: the result columns' names, the bytes each step must move (plain data);
- :mod:`benchmarks.suite.trees`: the parameter trees (GPT-2-small-shaped, many small leaves) and the sizes;
- :mod:`benchmarks.suite.workloads`: the optimizer of each workload in each library, with the bytes its step must move;
- :mod:`benchmarks.suite.timing`: compiling a donated step, timing it, and the copy and dispatch references;
- :mod:`benchmarks.suite.runners`: one workload measured (steps, compile times, L-BFGS to convergence);
- :mod:`benchmarks.suite.report`: the markdown tables of a run's results.
"""
