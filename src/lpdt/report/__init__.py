"""Tables, figures, claims check and the PDF report from the run records (``lpdt report``)."""
