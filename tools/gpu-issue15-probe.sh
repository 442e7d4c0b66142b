set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
bash tools/gpu-parity.sh $OUT/p .sdist import:.sdist/torch-build > $OUT/build.log 2>&1
echo "== gpu tests"
XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/pallas_kernels/test_ssd_pallas_gpu.py -k "varlen or oracle" > $OUT/pytest.txt 2>&1; tail -2 $OUT/pytest.txt
echo "== train 130m L65536"
timeout 200 python3 -m compare.train_throughput --configs mamba2-130m --torch --steps 8 --batch_size=1 --seq_len=65536 --out $OUT/tt-130m-65536 2>$OUT/tt1.err | tail -1
echo "== kernels long"
XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 140 python3 -m compare.kernels --op ssd --shapes long --reps 5 --impls pallas --pallas-config checkpoint_every=0 --out $OUT/ssd-long 2>$OUT/k.err | grep -E "^\| long" | cut -c1-120
echo "== train 780m L16384"
timeout 150 python3 -m compare.train_throughput --configs mamba2-780m --torch --steps 6 --batch_size=1 --seq_len=16384 --out $OUT/tt-780m-16384 2>$OUT/tt2.err | tail -1
