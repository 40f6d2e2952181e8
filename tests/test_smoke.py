from ksearch.harness import evaluate
from ksearch.tasks import get_task


def test_naive_softmax_passes_on_cpu(cpu_backend):
    task = get_task("softmax")
    r = evaluate(task, task.starting_source("cpu"), cpu_backend)
    assert r.status == "passed", r.message
    assert r.score > 0
    assert all(w.latency_s and w.latency_s > 0 for w in r.workloads)
