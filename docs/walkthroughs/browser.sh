# Run from the repository after `make install` (Chromium: apt-get install chromium).
WORK=${WORK:-var/walkthrough-browser} PORT=${PORT:-8765}
mkdir -p "$WORK"
# First the key: every manage.py command refuses to start without one, the sandbox too.
export SALVAGE_INSECURE_DEV_KEY=1 SALVAGE_DATA_DIR="$WORK/data"
export SALVAGE_ALLOWED_NETWORKS="127.0.0.1:$PORT"
# Serves /js/product/<n>, /js/listing, ...; the manifest file is written once it listens.
.venv/bin/python manage.py sandbox --port "$PORT" --manifest-out "$WORK/shop.csv" &
SANDBOX=$!
trap 'kill $SANDBOX' EXIT
until [ -s "$WORK/shop.csv" ]; do sleep 0.2; done
.venv/bin/python manage.py migrate --verbosity 0
.venv/bin/python manage.py loaddataset examples/js-shop.toml
#> dataset js-shop created (spec fd4e9f8104ac)
printf 'url\nhttp://127.0.0.1:%s/js/product/1\nhttp://127.0.0.1:%s/js/product/2\n' \
    "$PORT" "$PORT" > "$WORK/js.csv"
RUN=$(.venv/bin/python manage.py createrun js-shop --window 2026-12-01 \
    --manifest "$WORK/js.csv" | tail -n 1)
.venv/bin/python manage.py work --until-idle           # both pages committed with their prices
.venv/bin/python manage.py runstatus "$RUN"
#> run 1 js-shop@2026-12-01: candidate
#> tasks 2 (committed 2); terminal 2
