"""Speed and the GPU path: the toy loop's speed contract (bench.py), grading (bench_grading.py),
the learner at the study's shape (bench_learner.py, and the GPU box's check) and the GPU path
rehearsed on the CPU (rehearse_gpu_path.py). Run each from the repository root, e.g.
`python bench/bench.py`; they read the loop, which never reads them."""
