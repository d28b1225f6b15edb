#!/bin/sh
# The image's entrypoint: `anvil ...`, `locust ...` or any command runs as given; arguments
# that start with "-" are Locust's options (as with the official locustio/locust image, whose
# entrypoint is `locust`), the locustfile then coming from $LOCUST_LOCUSTFILE.
# Nothing is installed here: the image holds everything a run needs.
set -eu
if [ "$#" -eq 0 ]; then
    exec anvil --help
fi
case "$1" in
    -*) exec locust "$@" ;;
    *) exec "$@" ;;
esac
