# Run from the repository after `make install`. The sandbox plays Messora's API (seed 000):
# the same adapter talks to the real service when MESSORA_API_URL and MESSORA_API_KEY name it.
WORK=${WORK:-var/walkthrough-remote} PORT=${PORT:-8765}
mkdir -p "$WORK"
export SALVAGE_INSECURE_DEV_KEY=1 SALVAGE_DATA_DIR="$WORK/data"
export MESSORA_API_URL="http://127.0.0.1:$PORT/messora" MESSORA_API_KEY=sandbox-messora-key
export SALVAGE_ALLOWED_NETWORKS="127.0.0.1:$PORT"     # the simulator is on loopback
.venv/bin/python manage.py sandbox --port "$PORT" --pages 50 &
SANDBOX=$!
trap 'kill $SANDBOX' EXIT
cat > "$WORK/messora.toml" <<'SPEC'
name = "remote-shop"
provider = "messora"
[entity_key]
from = "url"
[provider_options]
kind = "batch"
batch_size = 10
[page_types.product.fields]
title = { selector = "h1", required = true }
SPEC
{ echo url; for i in $(seq 1 30); do echo "http://127.0.0.1:$PORT/product/$i"; done; } \
    > "$WORK/remote.csv"
until curl -sf "http://127.0.0.1:$PORT/_sandbox/state" > /dev/null; do sleep 0.2; done
.venv/bin/python manage.py migrate --verbosity 0
.venv/bin/python manage.py loaddataset "$WORK/messora.toml"
.venv/bin/python manage.py createrun remote-shop --window 2026-11-30 --manifest "$WORK/remote.csv"
.venv/bin/python manage.py work --until-idle        # 3 jobs submitted, polled, their rows saved
.venv/bin/python manage.py runstatus remote-shop@2026-11-30
#> run 1 remote-shop@2026-11-30: candidate
#> tasks 30 (committed 30); terminal 30
