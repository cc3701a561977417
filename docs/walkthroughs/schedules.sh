# Run from the repository after `make install`; lines starting with #> are what it prints.
WORK=${WORK:-var/walkthrough-schedules}
export SALVAGE_INSECURE_DEV_KEY=1 SALVAGE_DATA_DIR="$WORK/data"
.venv/bin/python manage.py migrate --verbosity 0
.venv/bin/python manage.py loaddataset examples/shop.toml
#> dataset shop created (spec 79ec247d9286)
.venv/bin/python manage.py schedule add shop nightly --daily 06:00 --tz Europe/London \
    --manifest examples/shop-manifest.csv --catch-up each:3
.venv/bin/python manage.py schedule add shop weekly --weekly "mon 06:00" --window-format "%G-W%V" \
    --manifest https://exports.example.com/shop.csv
.venv/bin/python manage.py schedule add shop sixhourly --cron "0 */6 * * *" \
    --window-format "%Y-%m-%dT%H" --manifest previous
.venv/bin/python manage.py schedule list          # recurrence, paused/active, last and next window
.venv/bin/python manage.py schedule pause shop nightly --reason "site migration"
#> schedule shop/nightly paused
.venv/bin/python manage.py schedule resume shop nightly
#> schedule shop/nightly active
.venv/bin/python manage.py schedule remove shop nightly   # its runs stay
#> schedule shop/nightly removed
