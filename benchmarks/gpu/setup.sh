# GPU machine, sourced from the carried repository root: install the carried wheels, put the data
# and the repository where the CPU machine has them (/work/shared/data, /work/main), cd there.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || return 1
mkdir -p /work/shared && rm -rf /work/shared/data && cp -r .gpu/data /work/shared/data
if [ "$(pwd -P)" != /work/main ]; then rm -rf /work/main && mkdir -p /work && cp -r . /work/main; fi
cd /work/main
export PYTHONPATH=/tmp/site:/work/main SYNTAXNMT_DATA=/work/shared/data PYTHONUNBUFFERED=1
python3 -c "import torch, syntaxnmt.training.train; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0))"
