# Run from the repository after `make install`. Everything is written under $WORK.
WORK=${WORK:-var/walkthrough-sandbox} PORT=${PORT:-8765}
mkdir -p "$WORK"
export SALVAGE_INSECURE_DEV_KEY=1 SALVAGE_DATA_DIR="$WORK/data"
# The sandbox is on loopback, which outbound safety refuses: allow its port, nothing else.
export SALVAGE_ALLOWED_NETWORKS="127.0.0.1:$PORT"
.venv/bin/python manage.py sandbox --port "$PORT" --pages 200 --faults mixed \
    --spec-out "$WORK/shop.toml" --manifest-out "$WORK/shop.csv" &
SANDBOX=$!
trap 'kill $SANDBOX' EXIT
until [ -s "$WORK/shop.csv" ]; do sleep 0.2; done      # written once it listens
.venv/bin/python manage.py migrate --verbosity 0
.venv/bin/python manage.py loaddataset "$WORK/shop.toml"
RUN=$(.venv/bin/python manage.py createrun sandbox-shop --window 2026-11-30 \
    --manifest "$WORK/shop.csv" | tail -n 1)
.venv/bin/python manage.py work --until-idle           # fetch, extract, commit, evaluate
.venv/bin/python manage.py runstatus "$RUN"
#> run 1 sandbox-shop@2026-11-30: candidate
#> tasks 200 (committed 189, quarantined 10, gone 1); terminal 200
