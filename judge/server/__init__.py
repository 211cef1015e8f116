"""judge over the network (`judge serve`): an HTTP API over the same library, for contestants, sharks and the
organizer on other machines, each with a token and a role; HTML pages of the scorecards for people.

- app.py: the settings, the state requests share, who a request comes from, errors as the CLI's JSON object;
- api.py + bodies.py: the JSON API (/api) and the bodies its writes take;
- jobs.py: rounds run in the background, their progress readable while they run;
- limits.py: body sizes, the rate per token and the proposals per contestant and round;
- documents.py + pages.py: the Markdown documents and the HTML pages (/pages).
"""

from .app import create_app
from .state import Config

__all__ = ["Config", "create_app"]
