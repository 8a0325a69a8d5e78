"""Alert rules over the current verdicts (FER, contradicted and block rates, critical verdicts), posted to a
webhook with retries; every alert fired is recorded and chained."""
