# Run from the repository after `make install`; lines starting with #> are what it prints.
WORK=${WORK:-var/walkthrough-examples}
export SALVAGE_INSECURE_DEV_KEY=1 SALVAGE_DATA_DIR="$WORK/data"
.venv/bin/python manage.py migrate --verbosity 0
.venv/bin/python manage.py loaddataset examples/shop.toml
#> dataset shop created (spec 79ec247d9286)
.venv/bin/python manage.py createrun shop --window 2026-11-29 --manifest examples/shop-manifest.csv
#> run 1 shop@2026-11-29 created: 9 task(s) added from 10 CSV line(s), manifest sha256 aefe78a0ecac
#> 1 duplicate URL(s) collapsed: line 10 repeats line 2 (http://127.0.0.1:8765/product/1 [product])
#> 1
.venv/bin/python manage.py runstatus shop@2026-11-29      # or: runstatus 1 --json
#> run 1 shop@2026-11-29: collecting
#> tasks 9 (pending 9); terminal 0
#> committed coverage 0.0% (committed tasks / logical tasks); observations 0
